// HDF5 helpers for the dataset files: 1-D columns written collectively (each rank its contiguous rows)
// or read whole / by row range, and small attributes. Every call is checked (WMTP_H5_CHECK); reads
// name the file and dataset in their errors. The checkpoint code has its own richer layer (ckpt/);
// these stay private to the data pipeline.
#pragma once
#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/h5_handle.h"

namespace wmtp::h5col {

template <class T> hid_t native_type();
template <> inline hid_t native_type<int32_t>() { return H5T_NATIVE_INT32; }
template <> inline hid_t native_type<int64_t>() { return H5T_NATIVE_INT64; }
template <> inline hid_t native_type<uint8_t>() { return H5T_NATIVE_UINT8; }
template <> inline hid_t native_type<double>() { return H5T_NATIVE_DOUBLE; }

// Collective create (truncating) through MPI-IO, collective metadata, libver >= 1.8.
H5Handle create_file_parallel(MPI_Comm comm, const std::string& path);
// Serial read-only open (any rank, independently). Throws Error(Input) if it is not an HDF5 file.
H5Handle open_file_read(const std::string& path);
H5Handle create_group(hid_t loc, const std::string& name);
bool exists(hid_t loc, const std::string& name);

// Collective: rows [offset, offset+count) of a new 1-D dataset of `total` rows (same on all ranks).
void write_column_raw(hid_t loc, const std::string& name, hid_t type, const void* data, int64_t count,
                      int64_t offset, int64_t total);
template <class T>
void write_column(hid_t loc, const std::string& name, const std::vector<T>& local, int64_t offset, int64_t total) {
  write_column_raw(loc, name, native_type<T>(), local.data(), static_cast<int64_t>(local.size()), offset, total);
}

// Rows of a 1-D dataset; `file` only names the file in errors.
int64_t column_length(hid_t loc, const std::string& name, const std::string& file);
void read_rows_raw(hid_t loc, const std::string& name, hid_t type, int64_t begin, int64_t count, void* out,
                   const std::string& file);
template <class T>
std::vector<T> read_column(hid_t loc, const std::string& name, const std::string& file) {
  std::vector<T> v(static_cast<size_t>(column_length(loc, name, file)));
  read_rows_raw(loc, name, native_type<T>(), 0, static_cast<int64_t>(v.size()), v.data(), file);
  return v;
}

// Attributes (collective when the file is open in parallel: every rank writes the same value).
void write_attr(hid_t obj, const std::string& name, int64_t v);
void write_attr(hid_t obj, const std::string& name, double v);
void write_attr(hid_t obj, const std::string& name, const std::string& v);
void write_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& v);
bool has_attr(hid_t obj, const std::string& name);
int64_t read_attr_int(hid_t obj, const std::string& name, const std::string& file);
double read_attr_double(hid_t obj, const std::string& name, const std::string& file);
std::string read_attr_string(hid_t obj, const std::string& name, const std::string& file);
std::vector<int64_t> read_attr_ints(hid_t obj, const std::string& name, const std::string& file);

}  // namespace wmtp::h5col
