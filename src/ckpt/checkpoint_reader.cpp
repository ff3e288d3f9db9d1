// CheckpointReader (see checkpoint.h, docs/checkpoint-format.md): validation at open, reads of any
// partition at any world size, and verification of what is read against the stored checksums.
#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "ckpt/checksum.h"
#include "ckpt/checksum_plan.h"
#include "ckpt/device_staging.h"
#include "ckpt/flat_range.h"
#include "ckpt/tensor_io.h"
#include "core/check.h"
#include "core/choice_names.h"
#include "core/h5.h"
#include "comm/agree.h"

namespace wmtp {

using namespace tensor_io;

// ---------------------------------------------------------------------------------------------
// Reader

struct CheckpointReader::Impl {
  std::string path;
  MPI_Comm comm;
  bool parallel;
  bool collective;  // ReadMode::Collective: H5Dread is collective
  bool verify;
  H5Handle file;
  H5Handle dxpl;
  CheckpointHeader header;

  std::string where(const std::string& group, const std::string& name) const {
    return "checkpoint '" + path + "': /" + group + "/" + name;
  }
  H5Handle open_dataset(const std::string& group, const std::string& name) const {
    const std::string p = group + "/" + name;
    if (!h5::exists(file, p)) throw_input_identical("checkpoint '", path, "' has no tensor /", p);
    return H5Handle(WMTP_H5_CHECK(H5Dopen2(file, p.c_str(), H5P_DEFAULT)));
  }
  // Opens each spec's dataset, checking its shape and (when verifying) reading its stored checksum.
  std::vector<H5Handle> open_specs(const std::string& group, const std::vector<TensorSpec>& specs,
                                   std::vector<uint64_t>& stored) const;
  TrainState read_train(bool check) const;  // /train; `check`: against its checksum
  void check_optimizer_step() const;        // the /optim step against its checksum
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

CheckpointReader::CheckpointReader(const std::string& path, MPI_Comm comm, ReadOptions options)
    : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  const ReadMode mode = options.mode;
  m.path = path;
  m.comm = comm;
  m.parallel = comm != MPI_COMM_NULL;
  m.collective = m.parallel && mode == ReadMode::Collective;
  m.verify = options.verify;
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
  m.dxpl = h5::transfer_plist(m.collective);
  // Same file, same metadata: every rank reaches the same verdict below.
  if (!h5::has_attr(m.file, "format"))
    throw_input_identical("'", path, "' is not a wmtp checkpoint (no 'format' attribute)");
  std::string format = reading(path, [&] { return h5::read_attr_string(m.file, "format"); });
  if (format != kCheckpointFormat)
    throw_input_identical("'", path, "' is not a wmtp checkpoint (format is '", format, "')");
  auto& in = m.header;
  in.path = path;
  in.version = reading(path, [&] { return h5::read_attr_int(m.file, "version"); });
  if (in.version != kCheckpointVersion)
    throw_input_identical("checkpoint '", path, "' has unsupported format version ", in.version,
                          " (this build of wmtp ", WMTP_VERSION, " reads version ", kCheckpointVersion, ")");
  const std::string kind = reading(path, [&] { return h5::read_attr_string(m.file, "kind"); });
  const std::optional<CheckpointKind> known = choice_value<CheckpointKind>(kCheckpointKindNames, kind);
  if (!known)
    throw_input_identical("checkpoint '", path, "' has kind '", kind, "', which is none of ",
                          join(kCheckpointKindNames, ", "));
  in.kind = *known;
  reading(path, [&] {
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
  if (m.verify) m.check_optimizer_step();
}

void CheckpointReader::Impl::check_optimizer_step() const {
  if (!header.has_optimizer) return;
  const bool ok = reading(path, [&] {
    H5Handle g(WMTP_H5_CHECK(H5Gopen2(file, "optim", H5P_DEFAULT)));
    return !h5::has_attr(g, "checksum") ||
           h5::read_attr_u64(g, "checksum") == optimizer_step_checksum(header.optimizer_step);
  });
  if (!ok)
    throw_input_identical("checkpoint '", path, "' is corrupt: the optimizer step (", header.optimizer_step,
                          ") does not match the checksum written with it");
}

CheckpointReader::~CheckpointReader() = default;

const CheckpointHeader& CheckpointReader::header() const { return impl_->header; }

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

// Checksum of the elements `sub` (inside `ranges`) of `data`, which holds the elements of `ranges`
// back to back in their stored representation.
uint64_t checksum_of(const at::Tensor& data, const FlatRanges& ranges, const FlatRanges& sub) {
  uint64_t sum = 0;
  size_t k = 0;
  int64_t pos = 0;  // position of ranges[k] in data
  for (auto [b, e] : sub) {
    while (k < ranges.size() && ranges[k].second <= b) pos += ranges[k].second - ranges[k].first, ++k;
    WMTP_CHECK(k < ranges.size() && ranges[k].first <= b, "checksum range [", b, ", ", e, ") was not read");
    sum += tensor_checksum(data.narrow(0, pos + (b - ranges[k].first), e - b), b);
  }
  return sum;
}

std::string corrupt_message(const std::string& path, const std::vector<std::string>& bad) {
  std::string names;
  for (size_t i = 0; i < bad.size() && i < 5; ++i) names += (i ? ", " : "") + bad[i];
  if (bad.size() > 5) names += ", and " + std::to_string(bad.size() - 5) + " more";
  return "checkpoint '" + path + "' is corrupt: the data of " + names +
         " does not match the checksum written with it (the file changed after it was written)";
}

// Reads the elements `ranges` of dataset `d` into a spec's `pieces`; returns them in their stored
// dtype, back to back: what the checksum covers.
at::Tensor read_into_pieces(hid_t d, hid_t dxpl, const std::vector<int64_t>& shape, const FlatRanges& ranges,
                            const std::vector<const TensorPiece*>& pieces) {
  // The engine's case — one contiguous float32 piece of a float32 dataset — reads straight into
  // the caller's buffer; anything else goes through a temporary.
  const at::Tensor* dst = pieces.size() == 1 && ranges.size() == 1 ? &pieces[0]->data : nullptr;
  if (dst && dst->scalar_type() == at::kFloat && dst->is_contiguous()) {
    // A GPU shard: read into pinned memory; the non-blocking copy up overlaps the next read.
    const at::Tensor target = dst->is_cpu() ? *dst : host_staging_buffer(dst->sizes(), at::kFloat, dst->device());
    if (read_ranges_into(d, dxpl, shape, ranges, target)) {
      if (!dst->is_cpu()) dst->copy_(target, /*non_blocking=*/true);
      return target;
    }
  }
  at::Tensor as_stored = read_ranges(d, dxpl, shape, ranges);
  int64_t pos = 0;
  for (const TensorPiece* p : pieces) {
    const int64_t n = p->data.numel();
    if (n == 0) continue;
    WMTP_CHECK(p->data.scalar_type() == at::kFloat, "piece of '", p->name, "' must be float32");
    at::Tensor out = p->data;  // a view into the caller's buffer (CPU or GPU): write through it
    out.copy_(as_stored.narrow(0, pos, n));
    pos += n;
  }
  return as_stored;
}

}  // namespace

std::vector<H5Handle> CheckpointReader::Impl::open_specs(const std::string& group, const std::vector<TensorSpec>& specs,
                                                         std::vector<uint64_t>& stored) const {
  std::vector<H5Handle> dsets;
  reading(path, [&] {
    for (size_t i = 0; i < specs.size(); ++i) {
      const TensorSpec& spec = specs[i];
      H5Handle d = open_dataset(group, spec.name);
      auto shape = h5::dataset_shape(d);
      if (shape != spec.shape)
        throw_input_identical("checkpoint '", path, "': tensor /", group, "/", spec.name, " has shape ",
                              shape_to_string(shape), " but the model expects ", shape_to_string(spec.shape));
      if (verify) {
        if (!h5::has_attr(d, "checksum"))
          throw_input_identical("checkpoint '", path, "': tensor /", group, "/", spec.name,
                                " has no checksum attribute, so it cannot be verified");
        stored[i] = h5::read_attr_u64(d, "checksum");
      }
      dsets.push_back(std::move(d));
    }
    return 0;
  });
  return dsets;
}

void CheckpointReader::check_tensors(const std::string& group, const std::vector<TensorSpec>& specs) const {
  std::vector<uint64_t> stored(specs.size(), 0);
  impl_->open_specs(group, specs, stored);
}

void CheckpointReader::read_tensors(const std::string& group, const std::vector<TensorSpec>& specs,
                                    std::vector<TensorPiece>& pieces) const {
  auto& m = *impl_;
  WMTP_CHECK(same_on_all_ranks(m.comm, specs_hash(specs)), "tensor specs for /", group, " differ across ranks");
  // Validate everything before the first collective read, so a bad file fails on every rank alike.
  std::vector<uint64_t> stored(specs.size(), 0);
  const std::vector<H5Handle> dsets = m.open_specs(group, specs, stored);
  const auto by_spec = pieces_by_spec(specs, pieces);
  std::vector<FlatRanges> ranges(specs.size());
  std::vector<int64_t> numel(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    numel[i] = shape_numel(specs[i].shape);
    for (const TensorPiece* p : by_spec[i])
      if (p->data.numel() > 0) ranges[i].emplace_back(p->offset, p->offset + p->data.numel());
  }
  // Who checksums what: each element once, unread elements read once more by someone.
  const ChecksumPlan plan = m.verify ? plan_checksums(m.comm, numel, ranges) : ChecksumPlan{};
  std::vector<uint64_t> sums(specs.size(), 0);
  auto read_all = [&] {
    for (size_t i = 0; i < specs.size(); ++i) {
      const at::Tensor as_stored = read_into_pieces(dsets[i], m.dxpl, specs[i].shape, ranges[i], by_spec[i]);
      if (!m.verify) continue;
      sums[i] += checksum_of(as_stored, ranges[i], plan.own[i]);
      if (plan.any_extra[i])  // elements no rank asked for: read only to check them
        sums[i] += checksum_of(read_ranges(dsets[i], m.dxpl, specs[i].shape, plan.extra[i]), plan.extra[i],
                               plan.extra[i]);
    }
    return 0;
  };
  // Independent reads have no collective inside: a rank that fails still reaches the agreement, so
  // every rank gets the same error. Collective reads would leave peers inside H5Dread: abort instead.
  if (m.collective) reading(m.path, read_all);
  else
    agreed(m.comm, [&] { reading(m.path, read_all); });
  if (!m.verify) return;
  all_sum_u64(m.comm, sums.data(), int(sums.size()));
  std::vector<std::string> bad;
  for (size_t i = 0; i < specs.size(); ++i)
    if (sums[i] != stored[i]) bad.push_back("/" + group + "/" + specs[i].name);
  if (!bad.empty()) throw_input_agreed(corrupt_message(m.path, bad));
}

at::Tensor CheckpointReader::read_tensor_stored(const std::string& group, const std::string& name) const {
  auto& m = *impl_;
  return reading(m.path, [&] {
    H5Handle d = m.open_dataset(group, name);
    auto shape = h5::dataset_shape(d);
    at::Tensor flat = read_ranges(d, m.dxpl, shape, {{0, shape_numel(shape)}});
    // Every rank reads all of it, so each checks it alone (no collective).
    if (m.verify) {
      if (!h5::has_attr(d, "checksum"))
        throw_input("checkpoint '", m.path, "': tensor /", group, "/", name,
                    " has no checksum attribute, so it cannot be verified");
      if (wmtp::tensor_checksum(flat, 0) != h5::read_attr_u64(d, "checksum"))
        throw_input(corrupt_message(m.path, {"/" + group + "/" + name}));
    }
    return flat.reshape(shape);
  });
}

at::Tensor CheckpointReader::read_tensor(const std::string& group, const std::string& name) const {
  return read_tensor_stored(group, name).to(at::kFloat);
}

TrainState CheckpointReader::read_train_state() const { return impl_->read_train(impl_->verify); }

TrainState CheckpointReader::Impl::read_train(bool check) const {
  const Impl& m = *this;
  TrainState st;
  if (!reading(path, [&] { return h5::is_group(file, "train"); })) return st;
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
        else
          st.set_doubles(key, std::move(v));
      } else if (cls == H5T_INTEGER && H5Tget_size(t) == 1 && H5Tget_sign(t) == H5T_SGN_NONE && !scalar) {
        std::vector<uint8_t> v(n);
        read_into(H5T_NATIVE_UINT8, v.data());
        st.set_bytes(key, std::move(v));
      } else if (cls == H5T_INTEGER) {
        std::vector<int64_t> v(n);
        read_into(H5T_NATIVE_INT64, v.data());
        if (scalar) st.set_int(key, v.at(0));
        else
          st.set_ints(key, std::move(v));
      } else {
        throw_input("checkpoint '", m.path, "': /", p, " has unsupported type ", h5::type_name(t));
      }
    }
    H5Handle g(WMTP_H5_CHECK(H5Gopen2(m.file, "train", H5P_DEFAULT)));
    if (check && h5::has_attr(g, "checksum") && h5::read_attr_u64(g, "checksum") != train_state_checksum(st))
      throw_input_identical("checkpoint '", m.path,
                            "' is corrupt: the /train values (step, data cursor, schedule) "
                            "do not match the checksum written with them");
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

std::optional<LoraRecord> CheckpointReader::read_lora_record() const {
  auto& m = *impl_;
  return reading(m.path, [&]() -> std::optional<LoraRecord> {
    if (!h5::is_group(m.file, "lora")) return std::nullopt;
    H5Handle g(WMTP_H5_CHECK(H5Gopen2(m.file, "lora", H5P_DEFAULT)));
    LoraRecord li;
    li.rank = h5::read_attr_int(g, "rank");
    li.alpha = h5::read_attr_double(g, "alpha");
    li.dropout = h5::read_attr_double(g, "dropout");
    li.targets = split(h5::read_attr_string(g, "targets"), ',');
    li.base_path = h5::read_attr_string(g, "base_path");
    li.base_fingerprint = h5::read_attr_string(g, "base_fingerprint");
    return li;
  });
}

std::optional<ValueHeadRecord> CheckpointReader::read_value_head_record() const {
  auto& m = *impl_;
  return reading(m.path, [&]() -> std::optional<ValueHeadRecord> {
    if (!h5::is_group(m.file, "value_head")) return std::nullopt;
    H5Handle g(WMTP_H5_CHECK(H5Gopen2(m.file, "value_head", H5P_DEFAULT)));
    ValueHeadRecord vi;
    const std::string type = h5::read_attr_string(g, "type");
    const auto known = choice_value<ValueHeadType>(kValueHeadTypeNames, type);
    if (!known) throw_input("checkpoint '", m.path, "': /value_head type '", type, "' is neither mlp nor linear");
    vi.type = *known;
    vi.hidden = h5::read_attr_int(g, "hidden");
    vi.dropout = h5::read_attr_double(g, "dropout");
    vi.bias_init = h5::read_attr_double(g, "bias_init");
    return vi;
  });
}

namespace {
// Every dataset under `path`, depth first in listing order (the same order on every rank).
void list_datasets(hid_t file, const std::string& path, std::vector<std::string>& out) {
  for (const std::string& n : h5::list(file, path.empty() ? "/" : path)) {
    const std::string p = path.empty() ? n : path + "/" + n;
    if (h5::is_group(file, p)) list_datasets(file, p, out);
    else
      out.push_back(p);
  }
}
}  // namespace

ChecksumReport CheckpointReader::verify_checksums() const {
  auto& m = *impl_;
  const int rank = comm_rank(m.comm), size = comm_size(m.comm);
  ChecksumReport rep;
  // Any layout: every dataset that carries a checksum, wherever it is; a tensor group's dataset
  // without one is a problem in itself.
  std::vector<std::string> paths, names;
  std::vector<uint64_t> stored, computed;
  reading(m.path, [&] {
    list_datasets(m.file, "", paths);
    return 0;
  });
  auto check_one = [&](const std::string& p) {
    reading(m.path, [&] {
      H5Handle d(WMTP_H5_CHECK(H5Dopen2(m.file, p.c_str(), H5P_DEFAULT)));
      if (!h5::has_attr(d, "checksum")) {
        if (p.rfind("model/", 0) == 0 || p.rfind("optim/", 0) == 0) rep.mismatched.push_back(p + " (no checksum)");
        return 0;
      }
      auto shape = h5::dataset_shape(d);
      const int64_t numel = shape_numel(shape);
      const int64_t per = (numel + size - 1) / size;
      const int64_t b = std::min<int64_t>(numel, per * rank), e = std::min<int64_t>(numel, b + per);
      at::Tensor part = read_ranges(d, m.dxpl, shape, {{b, e}});
      names.push_back(p);
      stored.push_back(h5::read_attr_u64(d, "checksum"));
      computed.push_back(wmtp::tensor_checksum(part, b));
      return 0;
    });
  };
  // As in read_tensors: independent reads let a failing rank reach the agreement.
  if (m.collective) {
    for (const std::string& p : paths) check_one(p);
  } else {
    agreed(m.comm, [&] {
      for (const std::string& p : paths) check_one(p);
    });
  }
  all_sum_u64(m.comm, computed.data(), int(computed.size()));
  rep.tensors = int64_t(names.size());
  for (size_t i = 0; i < names.size(); ++i)
    if (stored[i] != computed[i]) rep.mismatched.push_back(names[i]);
  // The /train values and the optimizer step have their own checksums (read_train_state, the
  // constructor): a mismatch there is an error of its own.
  try {
    m.read_train(/*check=*/true);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Input) throw;
    rep.mismatched.push_back("train");
  }
  try {
    m.check_optimizer_step();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Input) throw;
    rep.mismatched.push_back("optim (step)");
  }
  return rep;
}

}  // namespace wmtp
