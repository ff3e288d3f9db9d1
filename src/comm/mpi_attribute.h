// MpiAttribute<T>: a value that travels with MPI communicators as an attribute — copied into every
// communicator duplicated from one that carries it (MPI_Comm_dup calls the copy callback), deleted
// with the communicator. The collective watchdog (mpi_watch.h) and the byte counting (link_bytes.h)
// ride on communicators this way; MPI_Comm_split copies no attribute, so sub-communicators get theirs
// set explicitly (split_comm, mpi_util.h).
#pragma once
#include <mpi.h>

#include <optional>

#include "core/check.h"

namespace wmtp {

// Between MPI_Init and MPI_Finalize (attributes can be read only then).
inline bool mpi_running() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

template <class T>
class MpiAttribute {
 public:
  void set(MPI_Comm comm, T value) const { WMTP_MPI_CHECK(MPI_Comm_set_attr(comm, key(), new T(std::move(value)))); }
  // The value `comm` carries; nullopt without one (or outside MPI_Init .. MPI_Finalize).
  std::optional<T> get(MPI_Comm comm) const {
    if (comm == MPI_COMM_NULL || !mpi_running()) return std::nullopt;
    void* value = nullptr;
    int found = 0;
    MPI_Comm_get_attr(comm, key(), &value, &found);
    if (!found) return std::nullopt;
    return *static_cast<T*>(value);
  }
  void erase(MPI_Comm comm) const {
    if (mpi_running()) MPI_Comm_delete_attr(comm, key());
  }

 private:
  static int copy(MPI_Comm, int, void*, void* in, void* out, int* flag) {
    *static_cast<void**>(out) = new T(*static_cast<T*>(in));
    *flag = 1;
    return MPI_SUCCESS;
  }
  static int remove(MPI_Comm, int, void* value, void*) {
    delete static_cast<T*>(value);
    return MPI_SUCCESS;
  }
  // MPI's key for T's attribute, made once per process (MPI keeps it until MPI_Finalize).
  static int key() {
    static const int k = [] {
      int created = MPI_KEYVAL_INVALID;
      WMTP_MPI_CHECK(MPI_Comm_create_keyval(copy, remove, &created, nullptr));
      return created;
    }();
    return k;
  }
};

}  // namespace wmtp
