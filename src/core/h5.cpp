// The HDF5 layer (see h5.h).
#include "core/h5.h"

#include <algorithm>

#include "core/check.h"
#include "core/error.h"

namespace wmtp {

void H5Handle::reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: break;
  }
  id_ = H5I_INVALID_HID;
}

namespace h5 {

namespace {

H5Handle file_access_plist(MPI_Comm comm, bool coll_metadata) {
  H5Handle fapl(WMTP_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  // V18+ object headers: large attribute storage and creation-order-tracked groups.
  WMTP_H5_CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST));
  if (comm != MPI_COMM_NULL) {
    WMTP_H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
    WMTP_H5_CHECK(H5Pset_all_coll_metadata_ops(fapl, coll_metadata));
    WMTP_H5_CHECK(H5Pset_coll_metadata_write(fapl, true));
  }
  return fapl;
}

H5Handle string_type(size_t len) {
  H5Handle t(WMTP_H5_CHECK(H5Tcopy(H5T_C_S1)));
  WMTP_H5_CHECK(H5Tset_size(t, std::max<size_t>(len, 1)));  // HDF5 refuses size 0
  WMTP_H5_CHECK(H5Tset_strpad(t, H5T_STR_NULLPAD));
  WMTP_H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  return t;
}

// "file.h5:/samples" for messages.
std::string where(hid_t obj) {
  ssize_t n = H5Iget_name(obj, nullptr, 0);
  std::string path(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0) H5Iget_name(obj, path.data(), size_t(n) + 1);
  return file_name(obj) + ":" + (path.empty() ? "/" : path);
}

// Reads a string-typed attribute or dataset (fixed or variable length) through `read`.
template <class ReadFn>
std::string read_string(hid_t file_type, hid_t space, const std::string& what, ReadFn read) {
  if (H5Tget_class(file_type) != H5T_STRING) throw_input(what, " is not a string");
  if (H5Sget_simple_extent_npoints(space) != 1) throw_input(what, " is not a scalar string");
  if (H5Tis_variable_str(file_type) > 0) {
    H5Handle mt(WMTP_H5_CHECK(H5Tcopy(H5T_C_S1)));
    WMTP_H5_CHECK(H5Tset_size(mt, H5T_VARIABLE));
    char* p = nullptr;
    read(mt.get(), static_cast<void*>(&p));
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  size_t size = H5Tget_size(file_type);
  H5Handle mt(WMTP_H5_CHECK(H5Tcopy(file_type)));
  std::string buf(size, '\0');
  read(mt.get(), static_cast<void*>(buf.data()));
  buf.resize(std::char_traits<char>::length(buf.c_str()));  // NULLPAD / NULLTERM padding
  return buf;
}

H5Handle create_attr(hid_t obj, const std::string& name, hid_t type, hid_t space) {
  if (WMTP_H5_CHECK(H5Aexists(obj, name.c_str())) > 0) WMTP_H5_CHECK(H5Adelete(obj, name.c_str()));
  return H5Handle(WMTP_H5_CHECK(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT)));
}

H5Handle create_scalar_attr(hid_t obj, const std::string& name, hid_t type) {
  H5Handle space(WMTP_H5_CHECK(H5Screate(H5S_SCALAR)));
  return create_attr(obj, name, type, space);
}

std::string attr_where(hid_t obj, const std::string& name) { return where(obj) + " attribute '" + name + "'"; }

H5Handle open_attr(hid_t obj, const std::string& name) {
  if (WMTP_H5_CHECK(H5Aexists(obj, name.c_str())) <= 0) throw_input(attr_where(obj, name), " is missing");
  return H5Handle(WMTP_H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)));
}

template <class T>
T read_numeric_attr(hid_t obj, const std::string& name, hid_t mem_type, H5T_class_t want) {
  H5Handle a = open_attr(obj, name);
  H5Handle t(WMTP_H5_CHECK(H5Aget_type(a)));
  H5T_class_t cls = H5Tget_class(t);
  if (cls != want && !(want == H5T_FLOAT && cls == H5T_INTEGER))
    throw_input(attr_where(obj, name), " has type ", type_name(t), ", expected ",
                want == H5T_FLOAT ? "a number" : "an integer");
  H5Handle s(WMTP_H5_CHECK(H5Aget_space(a)));
  if (H5Sget_simple_extent_npoints(s) != 1) throw_input(attr_where(obj, name), " is not a scalar");
  T v{};
  WMTP_H5_CHECK(H5Aread(a, mem_type, &v));
  return v;
}

}  // namespace

void silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

// ---- files ----

H5Handle create_file(const std::string& path, MPI_Comm comm) {
  silence_errors();
  H5Handle fcpl(WMTP_H5_CHECK(H5Pcreate(H5P_FILE_CREATE)));
  WMTP_H5_CHECK(H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
  H5Handle fapl = file_access_plist(comm, true);
  // Closing the file closes whatever is still open in it: a writer abandoning a file after an error
  // must not leave it open (HDF5 would close it from MPI_Finalize, too late).
  WMTP_H5_CHECK(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG));
  try {
    return H5Handle(WMTP_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl)));
  } catch (const Error& e) {
    throw_runtime("cannot create HDF5 file '", path, "' (directory missing or not writable?): ", e.what());
  }
}

H5Handle open_file(const std::string& path, MPI_Comm comm, bool writable, bool collective_metadata) {
  silence_errors();
  H5Handle fapl = file_access_plist(comm, collective_metadata);
  return H5Handle(WMTP_H5_CHECK(H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl)));
}

bool is_hdf5_file(const std::string& path) {
  silence_errors();
  const bool ok = H5Fis_hdf5(path.c_str()) > 0;
  H5Eclear2(H5E_DEFAULT);
  return ok;
}

H5Handle open_file_read(const std::string& path) {
  if (!is_hdf5_file(path)) throw_input(path, ": not an HDF5 file (or cannot be opened)");
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    H5Eclear2(H5E_DEFAULT);
    throw_input(path, ": cannot open the HDF5 file");
  }
  return H5Handle(f);
}

std::string file_name(hid_t obj) {
  ssize_t n = H5Fget_name(obj, nullptr, 0);
  if (n <= 0) return "?";
  std::string s(size_t(n), '\0');
  H5Fget_name(obj, s.data(), size_t(n) + 1);
  return s;
}

H5Handle transfer_plist(bool parallel) {
  H5Handle dxpl(WMTP_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
  if (parallel) WMTP_H5_CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
  return dxpl;
}

// ---- groups and links ----

namespace {
std::vector<std::string> path_parts(const std::string& path) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos < path.size()) {
    size_t slash = path.find('/', pos);
    std::string part = path.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    pos = slash == std::string::npos ? path.size() : slash + 1;
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}
}  // namespace

H5Handle require_group(hid_t loc, const std::string& path) {
  H5Handle cur(WMTP_H5_CHECK(H5Oopen(loc, ".", H5P_DEFAULT)));
  for (const std::string& part : path_parts(path)) {
    H5Handle next;
    if (WMTP_H5_CHECK(H5Lexists(cur, part.c_str(), H5P_DEFAULT)) > 0) {
      next = H5Handle(WMTP_H5_CHECK(H5Gopen2(cur, part.c_str(), H5P_DEFAULT)));
    } else {
      H5Handle gcpl(WMTP_H5_CHECK(H5Pcreate(H5P_GROUP_CREATE)));
      WMTP_H5_CHECK(H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
      next = H5Handle(WMTP_H5_CHECK(H5Gcreate2(cur, part.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT)));
    }
    cur = std::move(next);
  }
  return cur;
}

bool exists(hid_t loc, const std::string& path) {
  std::string prefix;
  for (const std::string& part : path_parts(path)) {
    prefix += (prefix.empty() ? "" : "/") + part;
    if (WMTP_H5_CHECK(H5Lexists(loc, prefix.c_str(), H5P_DEFAULT)) <= 0) return false;
  }
  return true;
}

bool is_group(hid_t loc, const std::string& path) {
  if (!exists(loc, path)) return false;
  H5Handle obj(WMTP_H5_CHECK(H5Oopen(loc, path.c_str(), H5P_DEFAULT)));
  return H5Iget_type(obj) == H5I_GROUP;
}

std::vector<std::string> list(hid_t loc, const std::string& path) {
  H5Handle g(WMTP_H5_CHECK(H5Gopen2(loc, path.c_str(), H5P_DEFAULT)));
  H5Handle gcpl(WMTP_H5_CHECK(H5Gget_create_plist(g)));
  unsigned order_flags = 0;
  WMTP_H5_CHECK(H5Pget_link_creation_order(gcpl, &order_flags));
  H5_index_t index = (order_flags & H5P_CRT_ORDER_INDEXED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  };
  hsize_t idx = 0;
  WMTP_H5_CHECK(H5Literate(g, index, H5_ITER_INC, &idx, collect, &names));
  return names;
}

H5Handle open_dataset(hid_t loc, const std::string& path) {
  if (!exists(loc, path)) throw_input(where(loc), ": dataset '", path, "' is missing");
  return H5Handle(WMTP_H5_CHECK(H5Dopen2(loc, path.c_str(), H5P_DEFAULT)));
}

std::vector<int64_t> dataset_shape(hid_t dset) {
  H5Handle s(WMTP_H5_CHECK(H5Dget_space(dset)));
  int nd = WMTP_H5_CHECK(H5Sget_simple_extent_ndims(s));
  std::vector<hsize_t> dims(nd);
  if (nd > 0) WMTP_H5_CHECK(H5Sget_simple_extent_dims(s, dims.data(), nullptr));
  return std::vector<int64_t>(dims.begin(), dims.end());
}

// ---- types ----

H5Handle bf16_type() {
  H5Handle t(WMTP_H5_CHECK(H5Tcopy(H5T_IEEE_F32LE)));
  WMTP_H5_CHECK(H5Tset_fields(t, 15, 7, 8, 0, 7));
  WMTP_H5_CHECK(H5Tset_precision(t, 16));
  WMTP_H5_CHECK(H5Tset_size(t, 2));
  WMTP_H5_CHECK(H5Tset_ebias(t, 127));
  return t;
}

bool type_is_bf16(hid_t type) {
  if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 2) return false;
  size_t spos, epos, esize, mpos, msize;
  WMTP_H5_CHECK(H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize));
  return spos == 15 && epos == 7 && esize == 8 && mpos == 0 && msize == 7 && H5Tget_ebias(type) == 127;
}

std::string type_name(hid_t type) {
  const size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      if (type_is_bf16(type)) return "bfloat16";
      return "float" + std::to_string(8 * size);
    case H5T_INTEGER: return std::string(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(8 * size);
    case H5T_STRING: return "string";
    default: return "other";
  }
}

// ---- attributes ----

void write_attr(hid_t obj, const std::string& name, const std::string& value) {
  H5Handle t = string_type(value.size());
  H5Handle a = create_scalar_attr(obj, name, t);
  std::string buf = value.empty() ? std::string(1, '\0') : value;
  WMTP_H5_CHECK(H5Awrite(a, t, buf.data()));
}

void write_attr(hid_t obj, const std::string& name, int64_t value) {
  H5Handle a = create_scalar_attr(obj, name, H5T_STD_I64LE);
  WMTP_H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, &value));
}

void write_attr(hid_t obj, const std::string& name, double value) {
  H5Handle a = create_scalar_attr(obj, name, H5T_IEEE_F64LE);
  WMTP_H5_CHECK(H5Awrite(a, H5T_NATIVE_DOUBLE, &value));
}

void write_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& value) {
  hsize_t n[1] = {static_cast<hsize_t>(value.size())};
  H5Handle s(WMTP_H5_CHECK(value.empty() ? H5Screate(H5S_NULL) : H5Screate_simple(1, n, nullptr)));
  H5Handle a = create_attr(obj, name, H5T_STD_I64LE, s);
  if (!value.empty()) WMTP_H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, value.data()));
}

void write_attr_u64(hid_t obj, const std::string& name, uint64_t value) {
  H5Handle a = create_scalar_attr(obj, name, H5T_STD_U64LE);
  WMTP_H5_CHECK(H5Awrite(a, H5T_NATIVE_UINT64, &value));
}

bool has_attr(hid_t obj, const std::string& name) { return WMTP_H5_CHECK(H5Aexists(obj, name.c_str())) > 0; }

std::string read_attr_string(hid_t obj, const std::string& name) {
  H5Handle a = open_attr(obj, name);
  H5Handle t(WMTP_H5_CHECK(H5Aget_type(a)));
  H5Handle s(WMTP_H5_CHECK(H5Aget_space(a)));
  return read_string(t, s, attr_where(obj, name), [&](hid_t mt, void* buf) { WMTP_H5_CHECK(H5Aread(a, mt, buf)); });
}

int64_t read_attr_int(hid_t obj, const std::string& name) {
  return read_numeric_attr<int64_t>(obj, name, H5T_NATIVE_INT64, H5T_INTEGER);
}

double read_attr_double(hid_t obj, const std::string& name) {
  return read_numeric_attr<double>(obj, name, H5T_NATIVE_DOUBLE, H5T_FLOAT);
}

uint64_t read_attr_u64(hid_t obj, const std::string& name) {
  return read_numeric_attr<uint64_t>(obj, name, H5T_NATIVE_UINT64, H5T_INTEGER);
}

std::vector<int64_t> read_attr_ints(hid_t obj, const std::string& name) {
  H5Handle a = open_attr(obj, name);
  H5Handle t(WMTP_H5_CHECK(H5Aget_type(a)));
  if (H5Tget_class(t) != H5T_INTEGER) throw_input(attr_where(obj, name), " is not an integer array");
  H5Handle s(WMTP_H5_CHECK(H5Aget_space(a)));
  hssize_t n = H5Sget_simple_extent_npoints(s);
  std::vector<int64_t> v(static_cast<size_t>(std::max<hssize_t>(0, n)));
  if (!v.empty()) WMTP_H5_CHECK(H5Aread(a, H5T_NATIVE_INT64, v.data()));
  return v;
}

// ---- scalar string datasets ----

void write_string_dataset(hid_t loc, const std::string& name, const std::string& text, bool writer, hid_t dxpl) {
  H5Handle t = string_type(text.size());
  H5Handle space(WMTP_H5_CHECK(H5Screate(H5S_SCALAR)));
  H5Handle d(WMTP_H5_CHECK(H5Dcreate2(loc, name.c_str(), t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  H5Handle sel(WMTP_H5_CHECK(H5Screate(H5S_SCALAR)));
  if (!writer) WMTP_H5_CHECK(H5Sselect_none(sel));
  std::string buf = text.empty() ? std::string(1, '\0') : text;
  WMTP_H5_CHECK(H5Dwrite(d, t, sel, sel, dxpl, buf.data()));
}

std::string read_string_dataset(hid_t loc, const std::string& name) {
  H5Handle d = open_dataset(loc, name);
  H5Handle t(WMTP_H5_CHECK(H5Dget_type(d)));
  H5Handle s(WMTP_H5_CHECK(H5Dget_space(d)));
  return read_string(t, s, where(d),
                     [&](hid_t mt, void* buf) { WMTP_H5_CHECK(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf)); });
}

// ---- 1-D columns ----

H5Handle create_column(hid_t loc, const std::string& name, hid_t type, int64_t total) {
  hsize_t dims[1] = {static_cast<hsize_t>(total)};
  H5Handle fspace(WMTP_H5_CHECK(H5Screate_simple(1, dims, nullptr)));
  H5Handle dcpl(WMTP_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  WMTP_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));  // every row is written
  return H5Handle(WMTP_H5_CHECK(H5Dcreate2(loc, name.c_str(), type, fspace, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
}

void write_rows_raw(hid_t dset, hid_t type, const void* data, int64_t count, int64_t offset) {
  H5Handle fspace(WMTP_H5_CHECK(H5Dget_space(dset)));
  hsize_t dims[1] = {0};
  WMTP_H5_CHECK(H5Sget_simple_extent_dims(fspace, dims, nullptr));
  const int64_t total = static_cast<int64_t>(dims[0]);
  if (total == 0) return;  // nothing to write (every rank sees the same total)
  WMTP_CHECK(offset >= 0 && count >= 0 && offset + count <= total, "rows [", offset, ", ", offset + count,
             ") outside column ", where(dset), " of ", total);
  H5Handle mspace;
  if (count > 0) {
    hsize_t start[1] = {static_cast<hsize_t>(offset)}, cnt[1] = {static_cast<hsize_t>(count)};
    WMTP_H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, cnt, nullptr));
    mspace = H5Handle(WMTP_H5_CHECK(H5Screate_simple(1, cnt, nullptr)));
  } else {
    hsize_t one[1] = {1};
    mspace = H5Handle(WMTP_H5_CHECK(H5Screate_simple(1, one, nullptr)));
    WMTP_H5_CHECK(H5Sselect_none(fspace));
    WMTP_H5_CHECK(H5Sselect_none(mspace));
  }
  H5Handle file(WMTP_H5_CHECK(H5Iget_file_id(dset)));
  H5Handle fapl(WMTP_H5_CHECK(H5Fget_access_plist(file)));
  H5Handle dxpl = transfer_plist(H5Pget_driver(fapl) == H5FD_MPIO);
  WMTP_H5_CHECK(H5Dwrite(dset, type, mspace, fspace, dxpl, count > 0 ? data : nullptr));
}

int64_t column_length(hid_t loc, const std::string& name) {
  H5Handle d = open_dataset(loc, name);
  const std::vector<int64_t> shape = dataset_shape(d);
  if (shape.size() != 1) throw_input(where(d), " is not 1-D");
  return shape[0];
}

void read_rows_raw(hid_t loc, const std::string& name, hid_t type, int64_t begin, int64_t count, void* out) {
  H5Handle d = open_dataset(loc, name);
  if (count == 0) return;
  H5Handle fspace(WMTP_H5_CHECK(H5Dget_space(d)));
  hsize_t dims[1];
  if (H5Sget_simple_extent_ndims(fspace) != 1) throw_input(where(d), " is not 1-D");
  WMTP_H5_CHECK(H5Sget_simple_extent_dims(fspace, dims, nullptr));
  if (begin < 0 || begin + count > static_cast<int64_t>(dims[0]))
    throw_input(where(d), ": rows [", begin, ", ", begin + count, ") outside its ", dims[0], " rows");
  hsize_t start[1] = {static_cast<hsize_t>(begin)}, cnt[1] = {static_cast<hsize_t>(count)};
  WMTP_H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, cnt, nullptr));
  H5Handle mspace(WMTP_H5_CHECK(H5Screate_simple(1, cnt, nullptr)));
  if (H5Dread(d, type, mspace, fspace, H5P_DEFAULT, out) < 0) {
    H5Eclear2(H5E_DEFAULT);
    throw_input(where(d), ": cannot read (wrong type or corrupt file)");
  }
}

}  // namespace h5
}  // namespace wmtp
