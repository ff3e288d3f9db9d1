// A parallel HDF5 file written with the failure protocol (see collective_file.h).
#include "comm/collective_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace wmtp {

std::string free_space_note(const std::string& path, int64_t need) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  struct statvfs st {};
  if (statvfs(dir.c_str(), &st) != 0) return "";
  auto mb = [](double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f MB", bytes / 1e6);
    return std::string(buf);
  };
  const double free = double(st.f_bavail) * double(st.f_frsize), total = double(st.f_blocks) * double(st.f_frsize);
  if (need > 0 && free < double(need))
    return "no space left on the file system holding " + dir.string() + ": " + mb(free) + " free of " + mb(total) +
           ", not enough for the " + mb(double(need)) + " this file needs";
  return "the file system holding " + dir.string() + " has " + mb(free) + " free of " + mb(total);
}

CollectiveFile::CollectiveFile(std::string path, MPI_Comm comm)
    : path_(std::move(path)), comm_(comm), rank_(comm_rank(comm)) {
  // Tests set this to exercise what happens on file systems without fallocate (NFS v3, some Lustre).
  if (const char* off = std::getenv("WMTP_NO_FALLOCATE")) can_reserve_ = std::string(off) != "1";
  agreed(comm_, [&] { file_ = h5::create_file(path_, comm_); });
}

CollectiveFile::~CollectiveFile() {
  if (!closed_) abandon();
}

void CollectiveFile::reserve(int64_t bytes) {
  run([&] {
    if (rank_ != 0) return;
    // From the file's current end (what is written so far; HDF5 1.10 does not tell its end of
    // allocation through MPI-IO): `bytes` must cover what the next steps add, metadata included.
    struct stat st {};
    const off_t end = ::stat(path_.c_str(), &st) == 0 ? st.st_size : 0;
    need_ = int64_t(end) + bytes;
    if (!can_reserve_) return;
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw_runtime("cannot open '", path_, "' to reserve space: ", std::strerror(errno));
    const int rc = ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, end + off_t(bytes));
    const int err = errno;
    ::close(fd);
    if (rc == 0) return;
    if (err == EOPNOTSUPP || err == ENOSYS || err == EINVAL) {
      can_reserve_ = false;  // this file system cannot preallocate: rely on agreement alone
      return;
    }
    throw_runtime("cannot reserve its space (", std::strerror(err), ")");
  });
}

void CollectiveFile::close() {
  if (!file_.valid()) return;
  reserve(16 << 10);  // the flush may allocate a little metadata space
  run([&] { WMTP_H5_CHECK(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL)); });  // MPI_File_sync under MPI-IO
  // Every rank lets go of the id before closing: a close that fails is never retried (alone, it
  // would wait for the others in its barrier).
  run([&] {
    const hid_t id = file_.release();
    WMTP_H5_CHECK(H5Fclose(id));
  });
  closed_ = true;
  // Blocks reserved past the end are not needed any more: a shrinking truncate frees them.
  if (rank_ == 0 && can_reserve_) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path_, ec);
    if (!ec && ::truncate(path_.c_str(), off_t(size) + 1) == 0) (void)!::truncate(path_.c_str(), off_t(size));
  }
}

void CollectiveFile::fail(const Error& e) {
  // The note first: abandoning frees the file's space.
  const std::string note = bcast_string(comm_, rank_ == 0 ? free_space_note(path_, need_) : "");
  abandon();
  throw Error(e.kind(),
              "cannot write '" + path_ + "': " + e.what() + (note.empty() ? "" : " (" + note + ")") +
                  "; the unfinished file was removed",
              Reach::Agreed);
}

void CollectiveFile::abandon() noexcept {
  // Every rank is here together (after an agreed failure, or destroying an unclosed file), and the
  // id is valid on all of them or on none (only the close step lets go of it, on every rank).
  if (file_.valid()) {
    // The close below writes metadata: free the file's space first, so a full disk cannot fail it
    // on some ranks only.
    if (rank_ == 0) (void)!::truncate(path_.c_str(), 0);
    if (comm_ != MPI_COMM_NULL) MPI_Barrier(comm_);
    H5Fclose(file_.release());
    H5Eclear2(H5E_DEFAULT);
  }
  if (rank_ == 0) std::remove(path_.c_str());
  closed_ = true;
}

}  // namespace wmtp
