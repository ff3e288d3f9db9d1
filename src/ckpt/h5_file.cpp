// HDF5 helpers for checkpoint files (see h5_file.h).
#include "ckpt/h5_file.h"

#include <algorithm>

#include "core/check.h"

namespace wmtp {

namespace {

H5Handle file_access_plist(MPI_Comm comm, bool coll_metadata = true) {
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
  WMTP_H5_CHECK(H5Tset_size(t, std::max<size_t>(len, 1)));
  WMTP_H5_CHECK(H5Tset_strpad(t, H5T_STR_NULLPAD));
  WMTP_H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  return t;
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
  while (!buf.empty() && buf.back() == '\0') buf.pop_back();
  return buf;
}

H5Handle create_attr(hid_t obj, const std::string& name, hid_t type) {
  if (WMTP_H5_CHECK(H5Aexists(obj, name.c_str())) > 0) WMTP_H5_CHECK(H5Adelete(obj, name.c_str()));
  H5Handle space(WMTP_H5_CHECK(H5Screate(H5S_SCALAR)));
  return H5Handle(WMTP_H5_CHECK(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT)));
}

H5Handle open_attr(hid_t obj, const std::string& name) {
  if (WMTP_H5_CHECK(H5Aexists(obj, name.c_str())) <= 0) throw_input("missing attribute '", name, "'");
  return H5Handle(WMTP_H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)));
}

template <class T>
T read_numeric_attr(hid_t obj, const std::string& name, hid_t mem_type, H5T_class_t want) {
  H5Handle a = open_attr(obj, name);
  H5Handle t(WMTP_H5_CHECK(H5Aget_type(a)));
  H5T_class_t cls = H5Tget_class(t);
  if (cls != want && !(want == H5T_FLOAT && cls == H5T_INTEGER))
    throw_input("attribute '", name, "' has type ", h5_type_name(t));
  H5Handle s(WMTP_H5_CHECK(H5Aget_space(a)));
  if (H5Sget_simple_extent_npoints(s) != 1) throw_input("attribute '", name, "' is not a scalar");
  T v{};
  WMTP_H5_CHECK(H5Aread(a, mem_type, &v));
  return v;
}

}  // namespace

H5Handle h5_create_file(const std::string& path, MPI_Comm comm) {
  h5_silence_errors();
  H5Handle fcpl(WMTP_H5_CHECK(H5Pcreate(H5P_FILE_CREATE)));
  WMTP_H5_CHECK(H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
  H5Handle fapl = file_access_plist(comm);
  return H5Handle(WMTP_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl)));
}

H5Handle h5_open_file(const std::string& path, MPI_Comm comm, bool writable, bool collective_metadata) {
  h5_silence_errors();
  H5Handle fapl = file_access_plist(comm, collective_metadata);
  return H5Handle(WMTP_H5_CHECK(H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl)));
}

H5Handle h5_bf16_type() {
  H5Handle t(WMTP_H5_CHECK(H5Tcopy(H5T_IEEE_F32LE)));
  WMTP_H5_CHECK(H5Tset_fields(t, 15, 7, 8, 0, 7));
  WMTP_H5_CHECK(H5Tset_precision(t, 16));
  WMTP_H5_CHECK(H5Tset_size(t, 2));
  WMTP_H5_CHECK(H5Tset_ebias(t, 127));
  return t;
}

bool h5_type_is_bf16(hid_t type) {
  if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 2) return false;
  size_t spos, epos, esize, mpos, msize;
  WMTP_H5_CHECK(H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize));
  return spos == 15 && epos == 7 && esize == 8 && mpos == 0 && msize == 7 && H5Tget_ebias(type) == 127;
}

std::string h5_type_name(hid_t type) {
  const size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      if (h5_type_is_bf16(type)) return "bfloat16";
      return "float" + std::to_string(8 * size);
    case H5T_INTEGER:
      return std::string(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(8 * size);
    case H5T_STRING: return "string";
    default: return "other";
  }
}

H5Handle h5_require_group(hid_t loc, const std::string& path) {
  H5Handle cur(WMTP_H5_CHECK(H5Oopen(loc, ".", H5P_DEFAULT)));
  size_t pos = 0;
  while (pos < path.size()) {
    size_t slash = path.find('/', pos);
    std::string part = path.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    pos = slash == std::string::npos ? path.size() : slash + 1;
    if (part.empty()) continue;
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

bool h5_exists(hid_t loc, const std::string& path) {
  std::string prefix;
  size_t pos = 0;
  while (pos < path.size()) {
    size_t slash = path.find('/', pos);
    std::string part = path.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    pos = slash == std::string::npos ? path.size() : slash + 1;
    if (part.empty()) continue;
    prefix += (prefix.empty() ? "" : "/") + part;
    if (WMTP_H5_CHECK(H5Lexists(loc, prefix.c_str(), H5P_DEFAULT)) <= 0) return false;
  }
  return true;
}

bool h5_is_group(hid_t loc, const std::string& path) {
  if (!h5_exists(loc, path)) return false;
  H5Handle obj(WMTP_H5_CHECK(H5Oopen(loc, path.c_str(), H5P_DEFAULT)));
  return H5Iget_type(obj) == H5I_GROUP;
}

std::vector<std::string> h5_list(hid_t loc, const std::string& path) {
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

void h5_write_attr(hid_t obj, const std::string& name, const std::string& value) {
  H5Handle t = string_type(value.size());
  H5Handle a = create_attr(obj, name, t);
  std::string buf = value.empty() ? std::string(1, '\0') : value;
  WMTP_H5_CHECK(H5Awrite(a, t, buf.data()));
}

void h5_write_attr(hid_t obj, const std::string& name, int64_t value) {
  H5Handle a = create_attr(obj, name, H5T_STD_I64LE);
  WMTP_H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, &value));
}

void h5_write_attr(hid_t obj, const std::string& name, double value) {
  H5Handle a = create_attr(obj, name, H5T_IEEE_F64LE);
  WMTP_H5_CHECK(H5Awrite(a, H5T_NATIVE_DOUBLE, &value));
}

void h5_write_attr_u64(hid_t obj, const std::string& name, uint64_t value) {
  H5Handle a = create_attr(obj, name, H5T_STD_U64LE);
  WMTP_H5_CHECK(H5Awrite(a, H5T_NATIVE_UINT64, &value));
}

bool h5_has_attr(hid_t obj, const std::string& name) {
  return WMTP_H5_CHECK(H5Aexists(obj, name.c_str())) > 0;
}

std::string h5_read_attr_string(hid_t obj, const std::string& name) {
  H5Handle a = open_attr(obj, name);
  H5Handle t(WMTP_H5_CHECK(H5Aget_type(a)));
  H5Handle s(WMTP_H5_CHECK(H5Aget_space(a)));
  return read_string(t, s, "attribute '" + name + "'",
                     [&](hid_t mt, void* buf) { WMTP_H5_CHECK(H5Aread(a, mt, buf)); });
}

int64_t h5_read_attr_int(hid_t obj, const std::string& name) {
  return read_numeric_attr<int64_t>(obj, name, H5T_NATIVE_INT64, H5T_INTEGER);
}

double h5_read_attr_double(hid_t obj, const std::string& name) {
  return read_numeric_attr<double>(obj, name, H5T_NATIVE_DOUBLE, H5T_FLOAT);
}

uint64_t h5_read_attr_u64(hid_t obj, const std::string& name) {
  return read_numeric_attr<uint64_t>(obj, name, H5T_NATIVE_UINT64, H5T_INTEGER);
}

void h5_write_string_dataset(hid_t loc, const std::string& name, const std::string& text, bool writer,
                             hid_t dxpl) {
  H5Handle t = string_type(text.size());
  H5Handle space(WMTP_H5_CHECK(H5Screate(H5S_SCALAR)));
  H5Handle d(WMTP_H5_CHECK(H5Dcreate2(loc, name.c_str(), t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  H5Handle sel(WMTP_H5_CHECK(H5Screate(H5S_SCALAR)));
  if (!writer) WMTP_H5_CHECK(H5Sselect_none(sel));
  std::string buf = text.empty() ? std::string(1, '\0') : text;
  WMTP_H5_CHECK(H5Dwrite(d, t, sel, sel, dxpl, buf.data()));
}

std::string h5_read_string_dataset(hid_t loc, const std::string& name) {
  H5Handle d(WMTP_H5_CHECK(H5Dopen2(loc, name.c_str(), H5P_DEFAULT)));
  H5Handle t(WMTP_H5_CHECK(H5Dget_type(d)));
  H5Handle s(WMTP_H5_CHECK(H5Dget_space(d)));
  return read_string(t, s, "dataset '" + name + "'", [&](hid_t mt, void* buf) {
    WMTP_H5_CHECK(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
  });
}

std::vector<int64_t> h5_dataset_shape(hid_t dset) {
  H5Handle s(WMTP_H5_CHECK(H5Dget_space(dset)));
  int nd = WMTP_H5_CHECK(H5Sget_simple_extent_ndims(s));
  std::vector<hsize_t> dims(nd);
  if (nd > 0) WMTP_H5_CHECK(H5Sget_simple_extent_dims(s, dims.data(), nullptr));
  return std::vector<int64_t>(dims.begin(), dims.end());
}

H5Handle h5_transfer_plist(bool parallel) {
  H5Handle dxpl(WMTP_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
  if (parallel) WMTP_H5_CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
  return dxpl;
}

}  // namespace wmtp
