// Small HDF5 helpers for checkpoint files: opening (MPI-IO or serial), the bf16 custom float,
// group paths, fixed-length string and scalar attributes, string datasets, link listing.
// Every call is checked (WMTP_H5_CHECK); HDF5's own stderr printing is silenced by the openers.
//
// Parallel rules (HDF5 1.10, collective metadata on): every metadata call on a file opened with a
// communicator (creating groups/datasets/attributes, writing attributes, opening objects) is
// collective — all ranks make the same calls with the same arguments in the same order. Passing
// MPI_COMM_NULL opens the file serially (sec2 driver) for one-rank tools and quick validity checks.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/h5_handle.h"

namespace wmtp {

H5Handle h5_create_file(const std::string& path, MPI_Comm comm);  // truncates
H5Handle h5_open_file(const std::string& path, MPI_Comm comm, bool writable = false, bool collective_metadata = true);

// The bfloat16 custom float (sign bit 15, exponent bits 7-14 bias 127, mantissa bits 0-6) that
// h5py and H5Dread(NATIVE_FLOAT) convert to float32 (hpc-conventions §2.5).
H5Handle h5_bf16_type();
bool h5_type_is_bf16(hid_t type);
// "float32", "bfloat16", "float16", "float64", "int64", "int32", "uint8", ... for messages/inspect.
std::string h5_type_name(hid_t type);

// Opens or creates every group along `path` ("optim/exp_avg"). New groups track creation order,
// so listing them gives datasets in the order they were written.
H5Handle h5_require_group(hid_t loc, const std::string& path);
// True when every link along `path` exists (no error printed for missing ones).
bool h5_exists(hid_t loc, const std::string& path);
// Names of the links directly under `loc`/`path`, in creation order when tracked, else by name.
std::vector<std::string> h5_list(hid_t loc, const std::string& path);
bool h5_is_group(hid_t loc, const std::string& path);

// Attributes (created or overwritten). Strings are fixed-length, UTF-8, null-padded.
void h5_write_attr(hid_t obj, const std::string& name, const std::string& value);
void h5_write_attr(hid_t obj, const std::string& name, int64_t value);
void h5_write_attr(hid_t obj, const std::string& name, double value);
void h5_write_attr_u64(hid_t obj, const std::string& name, uint64_t value);
bool h5_has_attr(hid_t obj, const std::string& name);
std::string h5_read_attr_string(hid_t obj, const std::string& name);
int64_t h5_read_attr_int(hid_t obj, const std::string& name);
double h5_read_attr_double(hid_t obj, const std::string& name);
uint64_t h5_read_attr_u64(hid_t obj, const std::string& name);

// A scalar fixed-length string dataset (the resolved config, etc.). `writer` says whether this rank
// supplies the bytes (exactly one rank should; the others still make the collective calls).
void h5_write_string_dataset(hid_t loc, const std::string& name, const std::string& text, bool writer, hid_t dxpl);
std::string h5_read_string_dataset(hid_t loc, const std::string& name);

std::vector<int64_t> h5_dataset_shape(hid_t dset);

// A dataset-transfer property list: collective MPI-IO for parallel files, default otherwise.
H5Handle h5_transfer_plist(bool parallel);

}  // namespace wmtp
