// Checkpoint writer and reader over parallel HDF5 (see checkpoint.h, docs/checkpoint-format.md).
#include "ckpt/checkpoint.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>

#include "ckpt/checksum.h"
#include "ckpt/device_staging.h"
#include "ckpt/flat_range.h"
#include "core/check.h"
#include "core/h5.h"
#include "core/json.h"
#include "dist/agree.h"
#include "model/model_args.h"
#include "model/param_spec.h"

namespace wmtp {

std::vector<TensorSpec> tensor_specs_from(const std::vector<ParamSpec>& params) {
  std::vector<TensorSpec> out;
  out.reserve(params.size());
  for (const auto& p : params) out.push_back({p.fqn, p.shape});
  return out;
}

namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t pos = 0;
  while (true) {
    size_t q = s.find(sep, pos);
    out.push_back(s.substr(pos, q == std::string::npos ? std::string::npos : q - pos));
    if (q == std::string::npos) break;
    pos = q + 1;
  }
  return out;
}

uint64_t specs_hash(const std::vector<TensorSpec>& specs) {
  std::string s;
  for (const auto& t : specs) s += t.name + shape_to_string(t.shape) + "\n";
  return fnv1a64(s);
}

std::string utc_now_iso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

H5Handle make_dataspace(const std::vector<int64_t>& shape) {
  if (shape.empty()) return H5Handle(WMTP_H5_CHECK(H5Screate(H5S_SCALAR)));
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return H5Handle(WMTP_H5_CHECK(H5Screate_simple(int(dims.size()), dims.data(), nullptr)));
}

// Selects the union of the (sorted, disjoint) flat ranges in `space`; returns the element count.
int64_t select_ranges(hid_t space, const std::vector<int64_t>& shape,
                      const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  WMTP_H5_CHECK(H5Sselect_none(space));
  int64_t total = 0;
  bool first = true;
  for (auto [b, e] : ranges) {
    total += e - b;
    if (shape.empty()) {
      if (e > b) WMTP_H5_CHECK(H5Sselect_all(space));
      continue;
    }
    for (const FlatBlock& blk : flat_range_blocks(shape, b, e)) {
      std::vector<hsize_t> start(blk.start.begin(), blk.start.end()), count(blk.count.begin(), blk.count.end());
      WMTP_H5_CHECK(H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(),
                                        nullptr, count.data(), nullptr));
      first = false;
    }
  }
  return total;
}

H5Handle memory_space(int64_t n) {
  hsize_t dims[1] = {hsize_t(std::max<int64_t>(n, 1))};
  H5Handle s(WMTP_H5_CHECK(H5Screate_simple(1, dims, nullptr)));
  if (n == 0) WMTP_H5_CHECK(H5Sselect_none(s));
  return s;
}

// Groups a rank's pieces by spec index, sorted by offset, checked disjoint and in range.
std::vector<std::vector<const TensorPiece*>> pieces_by_spec(const std::vector<TensorSpec>& specs,
                                                            const std::vector<TensorPiece>& pieces) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < specs.size(); ++i) index[specs[i].name] = i;
  std::vector<std::vector<const TensorPiece*>> out(specs.size());
  for (const auto& p : pieces) {
    auto it = index.find(p.name);
    WMTP_CHECK(it != index.end(), "tensor piece '", p.name, "' has no spec");
    out[it->second].push_back(&p);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    auto& v = out[i];
    std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    const int64_t numel = shape_numel(specs[i].shape);
    int64_t end = 0;
    for (const TensorPiece* p : v) {
      WMTP_CHECK(p->data.defined() && p->data.dim() == 1, "piece of '", p->name, "' must be a 1-D tensor");
      WMTP_CHECK(p->offset >= end, "pieces of '", p->name, "' overlap at element ", p->offset);
      end = p->offset + p->data.numel();
      WMTP_CHECK(end <= numel, "piece [", p->offset, ", ", end, ") of '", p->name, "' exceeds its ",
                 numel, " elements");
    }
  }
  return out;
}

const char* dtype_name(StoreDtype d) { return d == StoreDtype::BFloat16 ? "bfloat16" : "float32"; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Writer

struct CheckpointWriter::Impl {
  std::string path;
  MPI_Comm comm;
  bool parallel;
  int rank;
  H5Handle file;
  H5Handle dxpl;
};

CheckpointWriter::CheckpointWriter(const std::string& path, MPI_Comm comm, const CheckpointHeader& header)
    : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  m.path = path;
  m.comm = comm;
  m.parallel = comm != MPI_COMM_NULL;
  m.rank = comm_rank(comm);
  // Metadata calls are collective with identical arguments: take every value from rank 0.
  const std::string kind = bcast_string(comm, header.kind);
  const std::string args = bcast_string(comm, header.model_args_json);
  const std::string created = bcast_string(comm, utc_now_iso8601());
  const int64_t step = std::stoll(bcast_string(comm, std::to_string(header.step)));
  if (kind != "full" && kind != "model" && kind != "lora")
    throw_usage("checkpoint kind '", kind, "' is not one of full, model, lora");
  agreed(comm, [&] { m.file = h5::create_file(path, comm); });
  m.dxpl = h5::transfer_plist(m.parallel);
  h5::write_attr(m.file, "format", std::string(kCheckpointFormat));
  h5::write_attr(m.file, "version", kCheckpointVersion);
  h5::write_attr(m.file, "kind", kind);
  h5::write_attr(m.file, "model_args", args);
  h5::write_attr(m.file, "created", created);
  h5::write_attr(m.file, "toolkit_version", std::string(WMTP_VERSION));
  h5::write_attr(m.file, "world_size", int64_t(comm_size(comm)));
  h5::write_attr(m.file, "step", step);
}

CheckpointWriter::~CheckpointWriter() = default;

void CheckpointWriter::write_tensors(const std::string& group, const std::vector<TensorSpec>& specs,
                                     const std::vector<TensorPiece>& pieces, StoreDtype dtype) {
  auto& m = *impl_;
  WMTP_CHECK(m.file.valid(), "checkpoint writer already closed");
  WMTP_CHECK(same_on_all_ranks(m.comm, specs_hash(specs)), "tensor specs for /", group, " differ across ranks");
  const auto by_spec = pieces_by_spec(specs, pieces);
  H5Handle g = h5::require_group(m.file, group);
  H5Handle bf16 = h5::bf16_type();
  const hid_t file_type = dtype == StoreDtype::BFloat16 ? bf16.get() : H5T_IEEE_F32LE;
  const hid_t mem_type = dtype == StoreDtype::BFloat16 ? bf16.get() : H5T_NATIVE_FLOAT;
  H5Handle dcpl(WMTP_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  WMTP_H5_CHECK(H5Pset_layout(dcpl, H5D_CONTIGUOUS));
  WMTP_H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
  WMTP_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));  // every element is written: skip fills

  std::vector<H5Handle> dsets;
  std::vector<uint64_t> sums(specs.size(), 0);
  HostStager stager(piece_data(by_spec));  // GPU pieces: copied to the host one dataset ahead
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& spec = specs[i];
    std::vector<at::Tensor> host = stager.take(i);
    WMTP_CHECK(!spec.name.empty() && spec.name.find('/') == std::string::npos, "tensor name '", spec.name,
               "' must be non-empty without '/'");
    H5Handle space = make_dataspace(spec.shape);
    H5Handle d(WMTP_H5_CHECK(
        H5Dcreate2(g, spec.name.c_str(), file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
    h5::write_attr(d, "torch_dtype", std::string(dtype_name(dtype)));

    std::vector<std::pair<int64_t, int64_t>> ranges;
    std::vector<at::Tensor> parts;
    for (const TensorPiece* p : by_spec[i]) {
      if (p->data.numel() == 0) continue;
      ranges.emplace_back(p->offset, p->offset + p->data.numel());
      at::Tensor t = host[ranges.size() - 1];
      if (dtype == StoreDtype::BFloat16) t = t.to(at::kBFloat16);
      sums[i] += tensor_checksum(t, p->offset);
      parts.push_back(std::move(t));
    }
    if (shape_numel(spec.shape) == 0) {  // no storage is allocated: nothing to write (and HDF5 would fail)
      dsets.push_back(std::move(d));
      continue;
    }
    const int64_t n = select_ranges(space, spec.shape, ranges);
    at::Tensor buf = parts.size() == 1 ? parts[0] : parts.empty() ? at::Tensor() : at::cat(parts);
    H5Handle mspace = memory_space(n);
    static const float dummy = 0.f;  // HDF5 wants a non-null buffer even for an empty selection
    const void* ptr = buf.defined() ? buf.data_ptr() : &dummy;
    WMTP_H5_CHECK(H5Dwrite(d, mem_type, mspace, space, m.dxpl, ptr));
    dsets.push_back(std::move(d));
  }
  all_sum_u64(m.comm, sums.data(), int(sums.size()));
  for (size_t i = 0; i < specs.size(); ++i) h5::write_attr_u64(dsets[i], "checksum", sums[i]);
}

void CheckpointWriter::write_optimizer_step(int64_t step) {
  auto& m = *impl_;
  step = std::stoll(bcast_string(m.comm, std::to_string(step)));
  H5Handle g = h5::require_group(m.file, "optim");
  h5::write_attr(g, "step", step);
}

void CheckpointWriter::write_train_state(const TrainState& state) {
  auto& m = *impl_;
  const TrainState st = TrainState::deserialize(bcast_string(m.comm, state.serialize()));
  H5Handle g = h5::require_group(m.file, "train");
  const bool writer = m.rank == 0;
  for (const auto& [key, value] : st.values()) {
    if (const std::string* s = std::get_if<std::string>(&value)) {
      h5::write_string_dataset(g, key, *s, writer, m.dxpl);
      continue;
    }
    hid_t ftype = H5T_STD_I64LE, mtype = H5T_NATIVE_INT64;
    const void* data = nullptr;
    int64_t n = 1;
    bool scalar = true;
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, double>) ftype = H5T_IEEE_F64LE, mtype = H5T_NATIVE_DOUBLE;
          if constexpr (std::is_arithmetic_v<T>) {
            data = &x;
          } else if constexpr (!std::is_same_v<T, std::string>) {
            using E = typename T::value_type;
            if constexpr (std::is_same_v<E, double>) ftype = H5T_IEEE_F64LE, mtype = H5T_NATIVE_DOUBLE;
            if constexpr (std::is_same_v<E, uint8_t>) ftype = H5T_STD_U8LE, mtype = H5T_NATIVE_UINT8;
            data = x.data();
            n = int64_t(x.size());
            scalar = false;
          }
        },
        value);
    H5Handle space = make_dataspace(scalar ? std::vector<int64_t>{} : std::vector<int64_t>{n});
    H5Handle d(WMTP_H5_CHECK(H5Dcreate2(g, key.c_str(), ftype, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    if (n == 0) continue;
    H5Handle sel = make_dataspace(scalar ? std::vector<int64_t>{} : std::vector<int64_t>{n});
    if (!writer) WMTP_H5_CHECK(H5Sselect_none(sel));
    WMTP_H5_CHECK(H5Dwrite(d, mtype, sel, sel, m.dxpl, data));
  }
}

void CheckpointWriter::write_config_toml(const std::string& toml) {
  auto& m = *impl_;
  const std::string text = bcast_string(m.comm, toml);
  H5Handle g = h5::require_group(m.file, "meta");
  h5::write_string_dataset(g, "config_toml", text, m.rank == 0, m.dxpl);
}

void CheckpointWriter::write_lora_info(const LoraInfo& info) {
  auto& m = *impl_;
  LoraInfo li = info;
  li.rank = std::stoll(bcast_string(m.comm, std::to_string(info.rank)));
  // Doubles travel as their bytes so every rank writes the identical attribute.
  auto bcast_double = [&](double v) {
    std::string s(reinterpret_cast<const char*>(&v), sizeof(v));
    s = bcast_string(m.comm, s);
    double out;
    std::memcpy(&out, s.data(), sizeof(out));
    return out;
  };
  li.alpha = bcast_double(info.alpha);
  li.dropout = bcast_double(info.dropout);
  li.targets = split(bcast_string(m.comm, join(info.targets, ",")), ',');
  li.base_path = bcast_string(m.comm, info.base_path);
  li.base_fingerprint = bcast_string(m.comm, info.base_fingerprint);
  H5Handle g = h5::require_group(m.file, "lora");
  h5::write_attr(g, "rank", li.rank);
  h5::write_attr(g, "alpha", li.alpha);
  h5::write_attr(g, "dropout", li.dropout);
  h5::write_attr(g, "targets", join(li.targets, ","));
  h5::write_attr(g, "base_path", li.base_path);
  h5::write_attr(g, "base_fingerprint", li.base_fingerprint);
}

void CheckpointWriter::write_value_head_info(const ValueHeadInfo& info) {
  auto& m = *impl_;
  auto bcast_double = [&](double v) {  // as bytes, so every rank writes the identical attribute
    std::string s(reinterpret_cast<const char*>(&v), sizeof(v));
    s = bcast_string(m.comm, s);
    double out;
    std::memcpy(&out, s.data(), sizeof(out));
    return out;
  };
  H5Handle g = h5::require_group(m.file, "value_head");
  h5::write_attr(g, "type", bcast_string(m.comm, info.type));
  h5::write_attr(g, "hidden", int64_t(std::stoll(bcast_string(m.comm, std::to_string(info.hidden)))));
  h5::write_attr(g, "dropout", bcast_double(info.dropout));
  h5::write_attr(g, "bias_init", bcast_double(info.bias_init));
}

void CheckpointWriter::close() {
  auto& m = *impl_;
  if (!m.file.valid()) return;
  WMTP_H5_CHECK(H5Fflush(m.file, H5F_SCOPE_GLOBAL));  // MPI_File_sync under MPI-IO
  WMTP_H5_CHECK(H5Fclose(m.file.get()));
  m.file = H5Handle();  // already closed: forget the id without closing again
}

// ---------------------------------------------------------------------------------------------
// Reader

struct CheckpointReader::Impl {
  std::string path;
  MPI_Comm comm;
  bool parallel;
  H5Handle file;
  H5Handle dxpl;
  CheckpointInfo info;

  std::string where(const std::string& group, const std::string& name) const {
    return "checkpoint '" + path + "': /" + group + "/" + name;
  }
  H5Handle open_dataset(const std::string& group, const std::string& name) const {
    const std::string p = group + "/" + name;
    if (!h5::exists(file, p)) throw_input_agreed("checkpoint '", path, "' has no tensor /", p);
    return H5Handle(WMTP_H5_CHECK(H5Dopen2(file, p.c_str(), H5P_DEFAULT)));
  }
};

namespace {

// Turns HDF5 failures while reading into input errors that name the file.
template <class Fn>
auto reading(const std::string& path, Fn fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Runtime) throw;
    throw_input("checkpoint '", path, "' is unreadable (truncated or corrupt?): ", e.what());
  }
}

std::string validate_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return "checkpoint '" + path + "' does not exist";
  if (fs::is_directory(path, ec)) return "checkpoint '" + path + "' is a directory, not a checkpoint file";
  if (!h5::is_hdf5_file(path))
    return "'" + path + "' is not a wmtp checkpoint (not an HDF5 file, or truncated before its header)";
  return "";
}

}  // namespace

CheckpointReader::CheckpointReader(const std::string& path, MPI_Comm comm, ReadMode mode)
    : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  m.path = path;
  m.comm = comm;
  m.parallel = comm != MPI_COMM_NULL;
  agreed(comm, [&] {
    if (std::string why = validate_path(path); !why.empty()) throw_input(why);
  });
  agreed(comm, [&] {
    try {
      m.file = h5::open_file(path, comm, /*writable=*/false, /*collective_metadata=*/mode == ReadMode::Collective);
    } catch (const Error& e) {
      // The innermost HDF5 message says what is wrong ("truncated file: eof = ..."); the rest is noise.
      std::string why = e.what();
      if (size_t semi = why.rfind("; "); semi != std::string::npos) why = why.substr(semi + 2);
      throw_input("checkpoint '", path, "' is truncated or corrupt (", why, ")");
    }
  });
  m.dxpl = h5::transfer_plist(m.parallel && mode == ReadMode::Collective);
  // Same file, same metadata: every rank reaches the same verdict below.
  if (!h5::has_attr(m.file, "format"))
    throw_input_agreed("'", path, "' is not a wmtp checkpoint (no 'format' attribute)");
  std::string format = reading(path, [&] { return h5::read_attr_string(m.file, "format"); });
  if (format != kCheckpointFormat)
    throw_input_agreed("'", path, "' is not a wmtp checkpoint (format is '", format, "')");
  auto& in = m.info;
  in.path = path;
  in.version = reading(path, [&] { return h5::read_attr_int(m.file, "version"); });
  if (in.version != kCheckpointVersion)
    throw_input_agreed("checkpoint '", path, "' has unsupported format version ", in.version,
                       " (this build of wmtp ", WMTP_VERSION, " reads version ", kCheckpointVersion, ")");
  reading(path, [&] {
    in.kind = h5::read_attr_string(m.file, "kind");
    in.model_args_json = h5::read_attr_string(m.file, "model_args");
    in.created = h5::read_attr_string(m.file, "created");
    in.toolkit_version = h5::read_attr_string(m.file, "toolkit_version");
    in.world_size = h5::read_attr_int(m.file, "world_size");
    in.step = h5::read_attr_int(m.file, "step");
    in.has_optimizer = h5::is_group(m.file, "optim");
    if (in.has_optimizer) {
      H5Handle g(WMTP_H5_CHECK(H5Gopen2(m.file, "optim", H5P_DEFAULT)));
      in.optimizer_step = h5::has_attr(g, "step") ? h5::read_attr_int(g, "step") : 0;
    }
    return 0;
  });
}

CheckpointReader::~CheckpointReader() = default;

const CheckpointInfo& CheckpointReader::info() const { return impl_->info; }

bool CheckpointReader::has_group(const std::string& group) const {
  return reading(impl_->path, [&] { return h5::is_group(impl_->file, group); });
}

bool CheckpointReader::has_tensor(const std::string& group, const std::string& name) const {
  return reading(impl_->path, [&] { return h5::exists(impl_->file, group + "/" + name); });
}

std::vector<std::string> CheckpointReader::tensor_names(const std::string& group) const {
  return reading(impl_->path, [&] {
    if (!h5::is_group(impl_->file, group)) return std::vector<std::string>{};
    std::vector<std::string> out;
    for (auto& n : h5::list(impl_->file, group))
      if (!h5::is_group(impl_->file, group + "/" + n)) out.push_back(n);
    return out;
  });
}

std::vector<int64_t> CheckpointReader::tensor_shape(const std::string& group, const std::string& name) const {
  return reading(impl_->path, [&] { return h5::dataset_shape(impl_->open_dataset(group, name)); });
}

std::string CheckpointReader::tensor_dtype(const std::string& group, const std::string& name) const {
  return reading(impl_->path, [&] {
    H5Handle d = impl_->open_dataset(group, name);
    H5Handle t(WMTP_H5_CHECK(H5Dget_type(d)));
    return h5::type_name(t);
  });
}

std::optional<uint64_t> CheckpointReader::tensor_checksum(const std::string& group, const std::string& name) const {
  return reading(impl_->path, [&]() -> std::optional<uint64_t> {
    H5Handle d = impl_->open_dataset(group, name);
    if (!h5::has_attr(d, "checksum")) return std::nullopt;
    return h5::read_attr_u64(d, "checksum");
  });
}

namespace {

// Reads the union of `ranges` of dataset `d` (collective) into a new contiguous 1-D tensor, in the
// stored dtype when it is float32/bfloat16 (exact), else converted to float32 by HDF5.
at::Tensor read_ranges(hid_t d, hid_t dxpl, const std::vector<int64_t>& shape,
                       const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  H5Handle ftype(WMTP_H5_CHECK(H5Dget_type(d)));
  H5Handle bf16 = h5::bf16_type();
  const bool is_bf16 = h5::type_is_bf16(ftype);
  if (H5Tget_class(ftype) != H5T_FLOAT) throw_input("tensor is stored as ", h5::type_name(ftype), ", not a float");
  H5Handle space(WMTP_H5_CHECK(H5Dget_space(d)));
  const int64_t n = select_ranges(space, shape, ranges);
  at::Tensor out = at::empty({n}, is_bf16 ? at::kBFloat16 : at::kFloat);
  if (shape_numel(shape) == 0) return out;  // a zero-size dataset has no storage to read
  H5Handle mspace = memory_space(n);
  static float dummy = 0.f;
  void* ptr = n > 0 ? out.data_ptr() : &dummy;
  WMTP_H5_CHECK(H5Dread(d, is_bf16 ? bf16.get() : H5T_NATIVE_FLOAT, mspace, space, dxpl, ptr));
  return out;
}

// read_ranges into `dst` (contiguous float32 of the selection's size) when the dataset is float32.
// Returns false, having done nothing, for other stored types. Collective like read_ranges: every rank
// must take the same branch, which holds because the dataset type is the same for all.
bool read_ranges_into(hid_t d, hid_t dxpl, const std::vector<int64_t>& shape,
                      const std::vector<std::pair<int64_t, int64_t>>& ranges, const at::Tensor& dst) {
  H5Handle ftype(WMTP_H5_CHECK(H5Dget_type(d)));
  if (H5Tget_class(ftype) != H5T_FLOAT || H5Tget_size(ftype) != 4) return false;
  H5Handle space(WMTP_H5_CHECK(H5Dget_space(d)));
  const int64_t n = select_ranges(space, shape, ranges);
  WMTP_CHECK(n == dst.numel(), "read buffer size");
  H5Handle mspace = memory_space(n);
  WMTP_H5_CHECK(H5Dread(d, H5T_NATIVE_FLOAT, mspace, space, dxpl, dst.data_ptr()));
  return true;
}

}  // namespace

void CheckpointReader::read_tensors(const std::string& group, const std::vector<TensorSpec>& specs,
                                    std::vector<TensorPiece>& pieces) const {
  auto& m = *impl_;
  WMTP_CHECK(same_on_all_ranks(m.comm, specs_hash(specs)), "tensor specs for /", group, " differ across ranks");
  // Validate everything before the first collective read, so a bad file fails on every rank alike.
  std::vector<H5Handle> dsets;
  reading(m.path, [&] {
    for (const auto& spec : specs) {
      H5Handle d = m.open_dataset(group, spec.name);
      auto shape = h5::dataset_shape(d);
      if (shape != spec.shape)
        throw_input_agreed("checkpoint '", m.path, "': tensor /", group, "/", spec.name, " has shape ",
                           shape_to_string(shape), " but the model expects ", shape_to_string(spec.shape));
      dsets.push_back(std::move(d));
    }
    return 0;
  });
  const auto by_spec = pieces_by_spec(specs, pieces);
  for (size_t i = 0; i < specs.size(); ++i) {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const TensorPiece* p : by_spec[i])
      if (p->data.numel() > 0) ranges.emplace_back(p->offset, p->offset + p->data.numel());
    // The engine's case — one contiguous float32 piece of a float32 dataset — reads straight into
    // the caller's buffer; anything else goes through a temporary.
    if (ranges.size() == 1 && by_spec[i].size() == 1) {
      const at::Tensor& dst = by_spec[i][0]->data;
      // A GPU shard: read into pinned memory; the non-blocking copy up overlaps the next read.
      const at::Tensor target = dst.is_cpu() ? dst : host_staging_buffer(dst.sizes(), at::kFloat, dst.device());
      if (dst.scalar_type() == at::kFloat && dst.is_contiguous() &&
          reading(m.path, [&] { return read_ranges_into(dsets[i], m.dxpl, specs[i].shape, ranges, target); })) {
        if (!dst.is_cpu()) dst.copy_(target, /*non_blocking=*/true);
        continue;
      }
    }
    at::Tensor flat = reading(m.path, [&] { return read_ranges(dsets[i], m.dxpl, specs[i].shape, ranges); });
    int64_t pos = 0;
    for (const TensorPiece* p : by_spec[i]) {
      const int64_t n = p->data.numel();
      if (n == 0) continue;
      WMTP_CHECK(p->data.scalar_type() == at::kFloat, "piece of '", p->name, "' must be float32");
      at::Tensor dst = p->data;  // a view into the caller's buffer (CPU or GPU): write through it
      dst.copy_(flat.narrow(0, pos, n));
      pos += n;
    }
  }
}

at::Tensor CheckpointReader::read_tensor_stored(const std::string& group, const std::string& name) const {
  auto& m = *impl_;
  return reading(m.path, [&] {
    H5Handle d = m.open_dataset(group, name);
    auto shape = h5::dataset_shape(d);
    at::Tensor flat = read_ranges(d, m.dxpl, shape, {{0, shape_numel(shape)}});
    return flat.reshape(shape);
  });
}

at::Tensor CheckpointReader::read_tensor(const std::string& group, const std::string& name) const {
  return read_tensor_stored(group, name).to(at::kFloat);
}

TrainState CheckpointReader::read_train_state() const {
  auto& m = *impl_;
  TrainState st;
  if (!has_group("train")) return st;
  reading(m.path, [&] {
    for (const std::string& key : h5::list(m.file, "train")) {
      const std::string p = "train/" + key;
      H5Handle d(WMTP_H5_CHECK(H5Dopen2(m.file, p.c_str(), H5P_DEFAULT)));
      H5Handle t(WMTP_H5_CHECK(H5Dget_type(d)));
      H5Handle s(WMTP_H5_CHECK(H5Dget_space(d)));
      const H5T_class_t cls = H5Tget_class(t);
      const bool scalar = H5Sget_simple_extent_type(s) == H5S_SCALAR;
      const int64_t n = H5Sget_simple_extent_npoints(s);
      auto read_into = [&](hid_t mtype, void* buf) {
        if (n > 0) WMTP_H5_CHECK(H5Dread(d, mtype, H5S_ALL, H5S_ALL, m.dxpl, buf));
      };
      if (cls == H5T_STRING) {
        st.set_string(key, h5::read_string_dataset(m.file, p));
      } else if (cls == H5T_FLOAT) {
        std::vector<double> v(n);
        read_into(H5T_NATIVE_DOUBLE, v.data());
        if (scalar) st.set_double(key, v.at(0));
        else st.set_doubles(key, std::move(v));
      } else if (cls == H5T_INTEGER && H5Tget_size(t) == 1 && H5Tget_sign(t) == H5T_SGN_NONE && !scalar) {
        std::vector<uint8_t> v(n);
        read_into(H5T_NATIVE_UINT8, v.data());
        st.set_bytes(key, std::move(v));
      } else if (cls == H5T_INTEGER) {
        std::vector<int64_t> v(n);
        read_into(H5T_NATIVE_INT64, v.data());
        if (scalar) st.set_int(key, v.at(0));
        else st.set_ints(key, std::move(v));
      } else {
        throw_input("checkpoint '", m.path, "': /", p, " has unsupported type ", h5::type_name(t));
      }
    }
    return 0;
  });
  return st;
}

std::optional<std::string> CheckpointReader::read_config_toml() const {
  auto& m = *impl_;
  return reading(m.path, [&]() -> std::optional<std::string> {
    if (!h5::exists(m.file, "meta/config_toml")) return std::nullopt;
    H5Handle g(WMTP_H5_CHECK(H5Gopen2(m.file, "meta", H5P_DEFAULT)));
    return h5::read_string_dataset(g, "config_toml");
  });
}

std::optional<LoraInfo> CheckpointReader::read_lora_info() const {
  auto& m = *impl_;
  return reading(m.path, [&]() -> std::optional<LoraInfo> {
    if (!h5::is_group(m.file, "lora")) return std::nullopt;
    H5Handle g(WMTP_H5_CHECK(H5Gopen2(m.file, "lora", H5P_DEFAULT)));
    LoraInfo li;
    li.rank = h5::read_attr_int(g, "rank");
    li.alpha = h5::read_attr_double(g, "alpha");
    li.dropout = h5::read_attr_double(g, "dropout");
    li.targets = split(h5::read_attr_string(g, "targets"), ',');
    li.base_path = h5::read_attr_string(g, "base_path");
    li.base_fingerprint = h5::read_attr_string(g, "base_fingerprint");
    return li;
  });
}

std::optional<ValueHeadInfo> CheckpointReader::read_value_head_info() const {
  auto& m = *impl_;
  return reading(m.path, [&]() -> std::optional<ValueHeadInfo> {
    if (!h5::is_group(m.file, "value_head")) return std::nullopt;
    H5Handle g(WMTP_H5_CHECK(H5Gopen2(m.file, "value_head", H5P_DEFAULT)));
    ValueHeadInfo vi;
    vi.type = h5::read_attr_string(g, "type");
    vi.hidden = h5::read_attr_int(g, "hidden");
    vi.dropout = h5::read_attr_double(g, "dropout");
    vi.bias_init = h5::read_attr_double(g, "bias_init");
    return vi;
  });
}

std::vector<std::string> CheckpointReader::verify_checksums() const {
  auto& m = *impl_;
  const int rank = comm_rank(m.comm), size = comm_size(m.comm);
  std::vector<std::string> names;
  std::vector<uint64_t> stored, computed;
  for (const char* group : {kModelGroup, kExpAvgGroup, kExpAvgSqGroup}) {
    for (const std::string& name : tensor_names(group)) {
      reading(m.path, [&] {
        H5Handle d = m.open_dataset(group, name);
        auto shape = h5::dataset_shape(d);
        const int64_t numel = shape_numel(shape);
        const int64_t per = (numel + size - 1) / size;
        const int64_t b = std::min<int64_t>(numel, per * rank), e = std::min<int64_t>(numel, b + per);
        at::Tensor part = read_ranges(d, m.dxpl, shape, {{b, e}});
        names.push_back(std::string(group) + "/" + name);
        stored.push_back(h5::has_attr(d, "checksum") ? h5::read_attr_u64(d, "checksum") : 0);
        computed.push_back(wmtp::tensor_checksum(part, b));
        return 0;
      });
    }
  }
  all_sum_u64(m.comm, computed.data(), int(computed.size()));
  std::vector<std::string> bad;
  for (size_t i = 0; i < names.size(); ++i)
    if (stored[i] != computed[i]) bad.push_back(names[i]);
  return bad;
}

// ---------------------------------------------------------------------------------------------
// Fingerprints

std::string model_fingerprint(const std::string& model_args_json, const std::vector<TensorSpec>& specs,
                              const std::vector<uint64_t>& checksums) {
  WMTP_CHECK(specs.size() == checksums.size(), "one checksum per tensor");
  // Canonical args: parse and re-emit, so formatting differences between writers do not matter.
  std::string args = model_args_json;
  try {
    if (!args.empty()) args = json::dump(model_args_to_json(model_args_from_json(json::parse(args), "model args")));
  } catch (const Error&) {
    // Not ModelArgs JSON (hand-made test files): fingerprint the text as it is.
  }
  std::vector<size_t> order(specs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return specs[a].name < specs[b].name; });
  std::string text = args + "\n";
  for (size_t i : order)
    text += specs[i].name + " " + shape_to_string(specs[i].shape) + " " + hex64(checksums[i]) + "\n";
  return "fnv1a64:" + hex64(fnv1a64(text));
}

void check_lora_base(const LoraInfo& info, const CheckpointReader& base) {
  if (info.base_fingerprint.empty()) return;
  const std::string actual = model_fingerprint(base);
  if (actual != info.base_fingerprint)
    throw_input_agreed("the LoRA adapters were trained on base '", info.base_path, "' (fingerprint ",
                       info.base_fingerprint, ") but '", base.info().path, "' has fingerprint ", actual,
                       " (different weights, names or shapes)");
}

std::string model_fingerprint(const CheckpointReader& base) {
  std::vector<TensorSpec> specs;
  std::vector<uint64_t> sums;
  for (const std::string& name : base.tensor_names(kModelGroup)) {
    specs.push_back({name, base.tensor_shape(kModelGroup, name)});
    auto sum = base.tensor_checksum(kModelGroup, name);
    if (!sum) throw_input("checkpoint '", base.info().path, "': /model/", name, " has no checksum attribute");
    sums.push_back(*sum);
  }
  return model_fingerprint(base.info().model_args_json, specs, sums);
}

}  // namespace wmtp
