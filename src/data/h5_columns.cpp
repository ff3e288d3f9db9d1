// 1-D HDF5 columns and attributes for the dataset files (parallel writes, serial reads).
#include "data/h5_columns.h"

#include <algorithm>
#include <string>

#include "core/check.h"
#include "core/error.h"

namespace wmtp::h5col {

H5Handle create_file_parallel(MPI_Comm comm, const std::string& path) {
  h5_silence_errors();
  H5Handle fapl(WMTP_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  WMTP_H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
  WMTP_H5_CHECK(H5Pset_all_coll_metadata_ops(fapl, 1));
  WMTP_H5_CHECK(H5Pset_coll_metadata_write(fapl, 1));
  WMTP_H5_CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST));
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (f < 0) throw_runtime(path, ": cannot create the output file (directory missing or not writable?)");
  return H5Handle(f);
}

H5Handle open_file_read(const std::string& path) {
  h5_silence_errors();
  htri_t is = H5Fis_hdf5(path.c_str());
  if (is <= 0) throw_input(path, ": not an HDF5 file (or cannot be opened)");
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw_input(path, ": cannot open the HDF5 file");
  return H5Handle(f);
}

H5Handle create_group(hid_t loc, const std::string& name) {
  return H5Handle(WMTP_H5_CHECK(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
}

bool exists(hid_t loc, const std::string& name) { return H5Lexists(loc, name.c_str(), H5P_DEFAULT) > 0; }

void write_column_raw(hid_t loc, const std::string& name, hid_t type, const void* data, int64_t count,
                      int64_t offset, int64_t total) {
  hsize_t dims[1] = {static_cast<hsize_t>(total)};
  H5Handle fspace(WMTP_H5_CHECK(H5Screate_simple(1, dims, nullptr)));
  H5Handle dcpl(WMTP_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  WMTP_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));  // every row is written
  H5Handle dset(WMTP_H5_CHECK(H5Dcreate2(loc, name.c_str(), type, fspace, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  if (total == 0) return;  // nothing to write (every rank sees the same total)
  WMTP_CHECK(offset >= 0 && count >= 0 && offset + count <= total, "rows [", offset, ", ", offset + count,
             ") outside column ", name, " of ", total);
  H5Handle mspace;
  if (count > 0) {
    hsize_t start[1] = {static_cast<hsize_t>(offset)}, cnt[1] = {static_cast<hsize_t>(count)};
    WMTP_H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, cnt, nullptr));
    mspace = H5Handle(WMTP_H5_CHECK(H5Screate_simple(1, cnt, nullptr)));
  } else {
    // Ranks with nothing to write still take part in the collective write, with empty selections.
    hsize_t one[1] = {1};
    mspace = H5Handle(WMTP_H5_CHECK(H5Screate_simple(1, one, nullptr)));
    WMTP_H5_CHECK(H5Sselect_none(fspace));
    WMTP_H5_CHECK(H5Sselect_none(mspace));
  }
  H5Handle dxpl(WMTP_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
  WMTP_H5_CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
  WMTP_H5_CHECK(H5Dwrite(dset, type, mspace, fspace, dxpl, count > 0 ? data : nullptr));
}

namespace {
H5Handle open_dataset(hid_t loc, const std::string& name, const std::string& file) {
  if (!exists(loc, name)) throw_input(file, ": dataset '", name, "' is missing (not a wmtp dataset, or an old one)");
  return H5Handle(WMTP_H5_CHECK(H5Dopen2(loc, name.c_str(), H5P_DEFAULT)));
}
}  // namespace

int64_t column_length(hid_t loc, const std::string& name, const std::string& file) {
  H5Handle d = open_dataset(loc, name, file);
  H5Handle s(WMTP_H5_CHECK(H5Dget_space(d)));
  if (H5Sget_simple_extent_ndims(s) != 1) throw_input(file, ": dataset '", name, "' is not 1-D");
  hsize_t dims[1];
  WMTP_H5_CHECK(H5Sget_simple_extent_dims(s, dims, nullptr));
  return static_cast<int64_t>(dims[0]);
}

void read_rows_raw(hid_t loc, const std::string& name, hid_t type, int64_t begin, int64_t count, void* out,
                   const std::string& file) {
  H5Handle d = open_dataset(loc, name, file);
  if (count == 0) return;
  H5Handle fspace(WMTP_H5_CHECK(H5Dget_space(d)));
  hsize_t dims[1];
  WMTP_H5_CHECK(H5Sget_simple_extent_dims(fspace, dims, nullptr));
  if (begin < 0 || begin + count > static_cast<int64_t>(dims[0]))
    throw_input(file, ": rows [", begin, ", ", begin + count, ") outside dataset '", name, "' of ", dims[0]);
  hsize_t start[1] = {static_cast<hsize_t>(begin)}, cnt[1] = {static_cast<hsize_t>(count)};
  WMTP_H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, cnt, nullptr));
  H5Handle mspace(WMTP_H5_CHECK(H5Screate_simple(1, cnt, nullptr)));
  if (H5Dread(d, type, mspace, fspace, H5P_DEFAULT, out) < 0)
    throw_input(file, ": cannot read dataset '", name, "' (wrong type or corrupt file)");
}

namespace {
void write_attr_raw(hid_t obj, const std::string& name, hid_t type, hid_t space, const void* v) {
  H5Handle a(WMTP_H5_CHECK(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT)));
  WMTP_H5_CHECK(H5Awrite(a, type, v));
}
H5Handle open_attr(hid_t obj, const std::string& name, const std::string& file) {
  if (H5Aexists(obj, name.c_str()) <= 0) throw_input(file, ": attribute '", name, "' is missing");
  return H5Handle(WMTP_H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)));
}
}  // namespace

void write_attr(hid_t obj, const std::string& name, int64_t v) {
  H5Handle s(WMTP_H5_CHECK(H5Screate(H5S_SCALAR)));
  write_attr_raw(obj, name, H5T_NATIVE_INT64, s, &v);
}

void write_attr(hid_t obj, const std::string& name, double v) {
  H5Handle s(WMTP_H5_CHECK(H5Screate(H5S_SCALAR)));
  write_attr_raw(obj, name, H5T_NATIVE_DOUBLE, s, &v);
}

void write_attr(hid_t obj, const std::string& name, const std::string& v) {
  H5Handle s(WMTP_H5_CHECK(H5Screate(H5S_SCALAR)));
  H5Handle t(WMTP_H5_CHECK(H5Tcopy(H5T_C_S1)));
  WMTP_H5_CHECK(H5Tset_size(t, std::max<size_t>(1, v.size())));  // HDF5 refuses size 0
  WMTP_H5_CHECK(H5Tset_strpad(t, H5T_STR_NULLPAD));
  WMTP_H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  std::string buf = v.empty() ? std::string(1, '\0') : v;
  write_attr_raw(obj, name, t, s, buf.data());
}

void write_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& v) {
  hsize_t n[1] = {static_cast<hsize_t>(v.size())};
  H5Handle s(WMTP_H5_CHECK(v.empty() ? H5Screate(H5S_NULL) : H5Screate_simple(1, n, nullptr)));
  write_attr_raw(obj, name, H5T_NATIVE_INT64, s, v.data());
}

bool has_attr(hid_t obj, const std::string& name) { return H5Aexists(obj, name.c_str()) > 0; }

int64_t read_attr_int(hid_t obj, const std::string& name, const std::string& file) {
  H5Handle a = open_attr(obj, name, file);
  int64_t v = 0;
  if (H5Aread(a, H5T_NATIVE_INT64, &v) < 0) throw_input(file, ": attribute '", name, "' is not an integer");
  return v;
}

double read_attr_double(hid_t obj, const std::string& name, const std::string& file) {
  H5Handle a = open_attr(obj, name, file);
  double v = 0;
  if (H5Aread(a, H5T_NATIVE_DOUBLE, &v) < 0) throw_input(file, ": attribute '", name, "' is not a number");
  return v;
}

std::string read_attr_string(hid_t obj, const std::string& name, const std::string& file) {
  H5Handle a = open_attr(obj, name, file);
  H5Handle t(WMTP_H5_CHECK(H5Aget_type(a)));
  if (H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t) > 0)
    throw_input(file, ": attribute '", name, "' is not a fixed-length string");
  size_t n = H5Tget_size(t);
  std::string v(n, '\0');
  WMTP_H5_CHECK(H5Aread(a, t, v.data()));
  v.resize(std::char_traits<char>::length(v.c_str()));  // NULLPAD / NULLTERM padding
  return v;
}

std::vector<int64_t> read_attr_ints(hid_t obj, const std::string& name, const std::string& file) {
  H5Handle a = open_attr(obj, name, file);
  H5Handle s(WMTP_H5_CHECK(H5Aget_space(a)));
  hssize_t n = H5Sget_simple_extent_npoints(s);
  std::vector<int64_t> v(static_cast<size_t>(std::max<hssize_t>(0, n)));
  if (!v.empty() && H5Aread(a, H5T_NATIVE_INT64, v.data()) < 0)
    throw_input(file, ": attribute '", name, "' is not an integer array");
  return v;
}

}  // namespace wmtp::h5col
