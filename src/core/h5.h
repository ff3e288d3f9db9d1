// The HDF5 layer every area uses (checkpoints in ckpt/, datasets in data/): an RAII handle, checked
// calls, file opening (MPI-IO or serial), groups, scalar attributes, string datasets, 1-D columns,
// and the bf16 custom float. Every HDF5 call goes through WMTP_H5_CHECK (core/check.h); HDF5's own
// printing of its error stack is silenced by the openers and the stack goes into the exception.
//
// Errors. A call that fails inside HDF5 is Error(Runtime) with HDF5's message. A file that is not
// what the caller expects (missing attribute or dataset, wrong type or rank, unreadable data) is
// Error(Input) naming the file (H5Fget_name) and the object, so callers need not pass file names.
//
// Parallel rules (HDF5 1.10, collective metadata on): every metadata call on a file opened with a
// communicator (creating groups/datasets/attributes, writing attributes, opening objects) is
// collective — all ranks make the same calls with the same arguments in the same order. Passing
// MPI_COMM_NULL opens the file serially (sec2 driver) for one-rank tools and readers.
#pragma once
#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace wmtp {

// Owner of one HDF5 identifier (file, group, dataset, dataspace, type, property list, attribute);
// closes it with the H5*close matching its type.
class H5Handle {
 public:
  H5Handle() = default;
  explicit H5Handle(hid_t id) : id_(id) {}
  ~H5Handle() { reset(); }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  H5Handle(H5Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) reset(), id_ = std::exchange(o.id_, H5I_INVALID_HID);
    return *this;
  }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();
  // Gives up ownership without closing (the id was closed some other way).
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

namespace h5 {

// Stop HDF5 printing its error stack to stderr: WMTP_H5_CHECK collects it into the exception.
void silence_errors();

// ---- files ----
// Creates (truncates) `path`: link creation order tracked (listings come in write order), object
// headers of HDF5 1.8+; MPI-IO with collective metadata when `comm` is not MPI_COMM_NULL. Closing
// it closes every object still open in it (H5F_CLOSE_STRONG).
// Error(Runtime) "cannot create HDF5 file '<path>': <why>".
H5Handle create_file(const std::string& path, MPI_Comm comm);
H5Handle open_file(const std::string& path, MPI_Comm comm, bool writable = false, bool collective_metadata = true);
// True when `path` is a readable HDF5 file (no error printed, none left on the stack).
bool is_hdf5_file(const std::string& path);
// Serial read-only open; Error(Input) "<path>: not an HDF5 file (or cannot be opened)".
H5Handle open_file_read(const std::string& path);
std::string file_name(hid_t obj);  // the file an object belongs to
// A dataset-transfer property list: collective MPI-IO for parallel files, default otherwise.
H5Handle transfer_plist(bool parallel);

// ---- groups and links ----
// Opens or creates every group along `path` ("optim/exp_avg"); new groups track creation order.
H5Handle require_group(hid_t loc, const std::string& path);
// True when every link along `path` exists.
bool exists(hid_t loc, const std::string& path);
bool is_group(hid_t loc, const std::string& path);
// Names of the links directly under `loc`/`path`, in creation order when tracked, else by name.
std::vector<std::string> list(hid_t loc, const std::string& path);
// Error(Input) "<file>: dataset '<path>' is missing" when absent.
H5Handle open_dataset(hid_t loc, const std::string& path);
std::vector<int64_t> dataset_shape(hid_t dset);

// ---- types ----
// The bfloat16 custom float (sign bit 15, exponent bits 7-14 bias 127, mantissa bits 0-6) that h5py
// and H5Dread(NATIVE_FLOAT) convert to float32 (docs/checkpoint-format.md).
H5Handle bf16_type();
bool type_is_bf16(hid_t type);
// "float32", "bfloat16", "int64", "uint8", "string", ... for messages and inspect.
std::string type_name(hid_t type);
template <class T>
hid_t native_type();
template <>
inline hid_t native_type<int32_t>() {
  return H5T_NATIVE_INT32;
}
template <>
inline hid_t native_type<int64_t>() {
  return H5T_NATIVE_INT64;
}
template <>
inline hid_t native_type<uint8_t>() {
  return H5T_NATIVE_UINT8;
}
template <>
inline hid_t native_type<double>() {
  return H5T_NATIVE_DOUBLE;
}

// ---- attributes (created or overwritten; strings are fixed-length UTF-8, null-padded) ----
void write_attr(hid_t obj, const std::string& name, const std::string& value);
void write_attr(hid_t obj, const std::string& name, int64_t value);
void write_attr(hid_t obj, const std::string& name, double value);
void write_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& value);
void write_attr_u64(hid_t obj, const std::string& name, uint64_t value);
bool has_attr(hid_t obj, const std::string& name);
// Error(Input) naming the file, object and attribute when missing or of another type.
std::string read_attr_string(hid_t obj, const std::string& name);
int64_t read_attr_int(hid_t obj, const std::string& name);
double read_attr_double(hid_t obj, const std::string& name);  // integers accepted
uint64_t read_attr_u64(hid_t obj, const std::string& name);
std::vector<int64_t> read_attr_ints(hid_t obj, const std::string& name);

// ---- scalar string datasets ----
// `writer` says whether this rank supplies the bytes (exactly one rank should; the others still make
// the collective calls).
void write_string_dataset(hid_t loc, const std::string& name, const std::string& text, bool writer, hid_t dxpl);
std::string read_string_dataset(hid_t loc, const std::string& name);

// ---- 1-D columns ----
// Collective on a parallel file, in two calls so that a writer can agree on each before the next
// (comm/collective_file.h): a new 1-D dataset of `total` rows (the same on all ranks), then this
// rank's rows [offset, offset+count) of it in one collective H5Dwrite; a rank with no rows joins
// with an empty selection.
H5Handle create_column(hid_t loc, const std::string& name, hid_t type, int64_t total);
void write_rows_raw(hid_t dset, hid_t type, const void* data, int64_t count, int64_t offset);
template <class T>
void write_rows(hid_t dset, const std::vector<T>& local, int64_t offset) {
  write_rows_raw(dset, native_type<T>(), local.data(), static_cast<int64_t>(local.size()), offset);
}
int64_t column_length(hid_t loc, const std::string& name);  // Error(Input) unless a 1-D dataset
void read_rows_raw(hid_t loc, const std::string& name, hid_t type, int64_t begin, int64_t count, void* out);
template <class T>
std::vector<T> read_column(hid_t loc, const std::string& name) {
  std::vector<T> v(static_cast<size_t>(column_length(loc, name)));
  read_rows_raw(loc, name, native_type<T>(), 0, static_cast<int64_t>(v.size()), v.data());
  return v;
}

}  // namespace h5
}  // namespace wmtp
