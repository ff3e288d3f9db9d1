// CollectiveFile: an HDF5 file that every rank of a communicator writes (parallel HDF5, MPI-IO), with
// the failure protocol that keeps a failed write from hanging or crashing the job. Checkpoints
// (ckpt/checkpoint.h) and datasets (preprocess-metadata, data/preprocess.h) are written through it.
//
// The danger: a write that fails on some ranks only (full disk, quota, I/O error) leaves the others
// inside the next collective — HDF5's own (a collective H5Dwrite, a metadata flush, H5Fclose's
// barrier) or ours — waiting forever, and a file left open when MPI_Finalize runs makes HDF5 close
// it from a finalize callback (a crash). The protocol:
//  - run(fn): each write step runs fn on every rank, then the ranks agree (comm/agree.h) before any
//    of them starts the next step; steps are small enough that no collective inside one can be
//    left by a failing rank while others wait in it (one H5Dwrite per step, for instance).
//  - reserve(bytes): before a step that grows the file, rank 0 allocates the file's blocks up to its
//    end of allocation plus `bytes` (fallocate, KEEP_SIZE), so a full disk or a quota is found there,
//    in a step of its own, before any collective write can half-fail. File systems without fallocate
//    skip this; agreement after each step still ends the job cleanly in most cases.
//  - on an agreed failure, every rank abandons the file together: rank 0 truncates it (freeing the
//    space the close needs for its metadata), all ranks close it, rank 0 removes it; then every rank
//    throws the same Error(Runtime) naming the file, the cause and the free space left.
// The destructor abandons a file that was not closed (every rank must destroy it: an agreed error
// elsewhere, for instance).
#pragma once
#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/h5.h"
#include "comm/agree.h"

namespace wmtp {

class CollectiveFile {
 public:
  // Collective: creates (truncates) `path`; MPI_COMM_NULL writes serially.
  CollectiveFile(std::string path, MPI_Comm comm);
  ~CollectiveFile();
  CollectiveFile(const CollectiveFile&) = delete;
  CollectiveFile& operator=(const CollectiveFile&) = delete;

  hid_t id() const { return file_.get(); }
  bool open() const { return file_.valid(); }
  const std::string& path() const { return path_; }

  // Collective: `fn` on every rank, then agreement; on any rank's failure, abandon and throw.
  template <class Fn>
  void run(Fn&& fn) {
    std::optional<Error> err;
    try {
      fn();
    } catch (...) {
      err = current_exception_as_error();
    }
    if (std::optional<Error> agreed_error = agree_on_error(comm_, err)) fail(*agreed_error);
  }
  // Collective: make room for `bytes` more (see above).
  void reserve(int64_t bytes);
  // Collective: flush (MPI_File_sync) and close; a failure abandons the file and throws.
  void close();

 private:
  [[noreturn]] void fail(const Error& e);
  void abandon() noexcept;

  std::string path_;
  MPI_Comm comm_;
  int rank_ = 0;
  H5Handle file_;
  bool closed_ = false;  // closed, or abandoned
  int64_t need_ = 0;     // rank 0: the size the file is expected to reach (last reserve)
  bool can_reserve_ = true;
};

// "the file system holding D has X MB free of Y MB", or when that is less than `need` (the size the
// file is expected to reach; 0: unknown) "no space left on the file system holding D: X MB free of
// Y MB, not enough for the Z MB this file needs"; "" when unknown.
std::string free_space_note(const std::string& path, int64_t need = 0);

}  // namespace wmtp
