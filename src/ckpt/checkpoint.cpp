// CheckpointWriter over parallel HDF5, checksums of small values, model fingerprints (see
// checkpoint.h, docs/checkpoint-format.md). The reader is checkpoint_reader.cpp.
#include "ckpt/checkpoint.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "ckpt/checksum.h"
#include "ckpt/device_staging.h"
#include "ckpt/flat_range.h"
#include "ckpt/tensor_io.h"
#include "core/check.h"
#include "core/choice_names.h"
#include "core/h5.h"
#include "core/json.h"
#include "comm/agree.h"
#include "comm/collective_file.h"
#include "comm/mpi_watch.h"
#include "model/model_args.h"
#include "model/param_spec.h"

namespace wmtp {

using namespace tensor_io;

std::vector<TensorSpec> tensor_specs_from(const std::vector<ParamSpec>& params) {
  std::vector<TensorSpec> out;
  out.reserve(params.size());
  for (const auto& p : params) out.push_back({p.fqn, p.shape});
  return out;
}

namespace {

std::string utc_now_iso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}


}  // namespace

// ---------------------------------------------------------------------------------------------
// Writer

namespace {

// Test-only: WMTP_TEST_PAUSE_CHECKPOINT_WRITE="STEP SECONDS" pauses the write of the step-STEP
// checkpoint for SECONDS on every rank, just before its first collective write of data (HDF5's
// MPI-IO, which only the write's own watch covers), so a test can cut a host off mid-write. 0 when
// unset or another step.
double test_pause_s(int64_t step) {
  const char* v = std::getenv("WMTP_TEST_PAUSE_CHECKPOINT_WRITE");
  std::istringstream in(v ? v : "");
  int64_t at = 0;
  double seconds = 0;
  return (in >> at >> seconds) && at == step ? seconds : 0;
}

}  // namespace

struct CheckpointWriter::Impl {
  MPI_Comm comm;
  int rank;
  std::string path;
  // First: the whole write, HDF5's MPI-IO included, under the MPI watchdog's checkpoint deadline
  // (comm/mpi_watch.h); ends when the file is closed (or the writer destroyed, on errors).
  std::unique_ptr<WatchedMpiSection> watch;
  std::unique_ptr<CollectiveFile> file;  // every write goes through its failure protocol
  H5Handle dxpl;
  double pause_s = 0;  // test_pause_s

  hid_t id() const {
    WMTP_CHECK(file && file->open(), "checkpoint writer already closed");
    return file->id();
  }
};

CheckpointWriter::CheckpointWriter(const std::string& path, MPI_Comm comm, const CheckpointHeader& header)
    : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  m.watch = std::make_unique<WatchedMpiSection>(comm, "checkpoint write " + path);
  m.comm = comm;
  m.rank = comm_rank(comm);
  m.path = path;
  // Metadata calls are collective with identical arguments: take every value from rank 0.
  const std::string kind = bcast_string(comm, choice_name(kCheckpointKindNames, header.kind));
  const std::string args = bcast_string(comm, header.model_args_json);
  const std::string created = bcast_string(comm, utc_now_iso8601());
  const int64_t step = std::stoll(bcast_string(comm, std::to_string(header.step)));
  m.pause_s = test_pause_s(step);
  m.file = std::make_unique<CollectiveFile>(path, comm);
  m.dxpl = h5::transfer_plist(comm != MPI_COMM_NULL);
  m.file->reserve(int64_t(16 << 10) + int64_t(args.size()));
  m.file->run([&] {
    const hid_t f = m.id();
    h5::write_attr(f, "format", std::string(kCheckpointFormat));
    h5::write_attr(f, "version", kCheckpointVersion);
    h5::write_attr(f, "kind", kind);
    h5::write_attr(f, "model_args", args);
    h5::write_attr(f, "created", created);
    h5::write_attr(f, "toolkit_version", std::string(WMTP_VERSION));
    h5::write_attr(f, "world_size", int64_t(comm_size(comm)));
    h5::write_attr(f, "step", step);
  });
}

CheckpointWriter::~CheckpointWriter() = default;

void CheckpointWriter::write_tensors(const std::string& group, const std::vector<TensorSpec>& specs,
                                     const std::vector<TensorPiece>& pieces, StoreDtype dtype) {
  auto& m = *impl_;
  m.id();
  WMTP_CHECK(same_on_all_ranks(m.comm, specs_hash(specs)), "tensor specs for /", group, " differ across ranks");
  const auto by_spec = pieces_by_spec(specs, pieces);
  for (const TensorSpec& spec : specs)
    WMTP_CHECK(!spec.name.empty() && spec.name.find('/') == std::string::npos, "tensor name '", spec.name,
               "' must be non-empty without '/'");
  // Room for the data and the datasets' headers first: a full disk is found here, before any
  // collective write can fail on some ranks only.
  const int64_t elem_bytes = dtype == StoreDtype::BFloat16 ? 2 : 4;
  int64_t bytes = 16 << 10;
  for (const TensorSpec& spec : specs) bytes += shape_numel(spec.shape) * elem_bytes + (2 << 10);
  m.file->reserve(bytes);

  H5Handle bf16 = h5::bf16_type();
  const hid_t file_type = dtype == StoreDtype::BFloat16 ? bf16.get() : H5T_IEEE_F32LE;
  const hid_t mem_type = dtype == StoreDtype::BFloat16 ? bf16.get() : H5T_NATIVE_FLOAT;
  std::vector<H5Handle> dsets;
  m.file->run([&] {
    H5Handle g = h5::require_group(m.id(), group);
    H5Handle dcpl(WMTP_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
    WMTP_H5_CHECK(H5Pset_layout(dcpl, H5D_CONTIGUOUS));
    WMTP_H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
    WMTP_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));  // every element is written: skip fills
    for (const TensorSpec& spec : specs) {
      H5Handle space = make_dataspace(spec.shape);
      H5Handle d(WMTP_H5_CHECK(H5Dcreate2(g, spec.name.c_str(), file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
      h5::write_attr(d, "torch_dtype", std::string(torch_dtype_name(dtype)));
      dsets.push_back(std::move(d));
    }
  });

  std::vector<uint64_t> sums(specs.size(), 0);
  HostStager stager(piece_data(by_spec));  // GPU pieces: copied to the host one dataset ahead
  for (size_t i = 0; i < specs.size(); ++i) {
    if (shape_numel(specs[i].shape) == 0) continue;  // no storage is allocated: nothing to write
    // This rank's elements in the stored dtype, on the CPU. Its own step: a rank failing here must
    // not leave the others inside the collective write below.
    FlatRanges ranges;
    at::Tensor buf;
    m.file->run([&] {
      std::vector<at::Tensor> host = stager.take(i);
      std::vector<at::Tensor> parts;
      for (const TensorPiece* p : by_spec[i]) {
        if (p->data.numel() == 0) continue;
        ranges.emplace_back(p->offset, p->offset + p->data.numel());
        at::Tensor t = host[ranges.size() - 1];
        if (dtype == StoreDtype::BFloat16) t = t.to(at::kBFloat16);
        sums[i] += tensor_checksum(t, p->offset);
        parts.push_back(std::move(t));
      }
      buf = parts.size() == 1 ? parts[0] : parts.empty() ? at::Tensor() : at::cat(parts);
    });
    m.file->run([&] {
      H5Handle space(WMTP_H5_CHECK(H5Dget_space(dsets[i])));
      const int64_t n = select_ranges(space, specs[i].shape, ranges);
      H5Handle mspace = memory_space(n);
      static const float dummy = 0.f;  // HDF5 wants a non-null buffer even for an empty selection
      const void* ptr = buf.defined() ? buf.data_ptr() : &dummy;
      if (m.pause_s > 0) {
        if (m.rank == 0) {
          fprintf(stderr,
                  "wmtp-test: checkpoint write of %s paused for %.0f s before its first collective write "
                  "(WMTP_TEST_PAUSE_CHECKPOINT_WRITE)\n",
                  m.path.c_str(), m.pause_s);
          fflush(stderr);
        }
        std::this_thread::sleep_for(std::chrono::duration<double>(m.pause_s));
        m.pause_s = 0;
      }
      WMTP_H5_CHECK(H5Dwrite(dsets[i], mem_type, mspace, space, m.dxpl, ptr));
    });
  }
  all_sum_u64(m.comm, sums.data(), int(sums.size()));
  m.file->run([&] {
    for (size_t i = 0; i < specs.size(); ++i) h5::write_attr_u64(dsets[i], "checksum", sums[i]);
  });
}

void CheckpointWriter::write_optimizer_step(int64_t step) {
  auto& m = *impl_;
  step = std::stoll(bcast_string(m.comm, std::to_string(step)));
  m.file->reserve(16 << 10);
  m.file->run([&] {
    H5Handle g = h5::require_group(m.id(), "optim");
    h5::write_attr(g, "step", step);
    h5::write_attr_u64(g, "checksum", optimizer_step_checksum(step));
  });
}

void CheckpointWriter::write_train_state(const TrainState& state) {
  auto& m = *impl_;
  const std::string bytes = bcast_string(m.comm, state.serialize());
  const TrainState st = TrainState::deserialize(bytes);
  m.file->reserve(int64_t(16 << 10) + int64_t(bytes.size()) + int64_t(st.values().size()) * (2 << 10));
  H5Handle g;
  m.file->run([&] { g = h5::require_group(m.id(), "train"); });
  const bool writer = m.rank == 0;
  for (const auto& [key, value] : st.values()) {
    // One step per key: each holds a collective write.
    m.file->run([&] {
      if (const std::string* s = std::get_if<std::string>(&value)) {
        h5::write_string_dataset(g, key, *s, writer, m.dxpl);
        return;
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
      if (n == 0) return;
      H5Handle sel = make_dataspace(scalar ? std::vector<int64_t>{} : std::vector<int64_t>{n});
      if (!writer) WMTP_H5_CHECK(H5Sselect_none(sel));
      WMTP_H5_CHECK(H5Dwrite(d, mtype, sel, sel, m.dxpl, data));
    });
  }
  m.file->run([&] { h5::write_attr_u64(g, "checksum", train_state_checksum(st)); });
}

void CheckpointWriter::write_config_toml(const std::string& toml) {
  auto& m = *impl_;
  const std::string text = bcast_string(m.comm, toml);
  m.file->reserve(int64_t(16 << 10) + int64_t(text.size()));
  m.file->run([&] {
    H5Handle g = h5::require_group(m.id(), "meta");
    h5::write_string_dataset(g, "config_toml", text, m.rank == 0, m.dxpl);
  });
}

void CheckpointWriter::write_lora_record(const LoraRecord& info) {
  auto& m = *impl_;
  LoraRecord li = info;
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
  m.file->reserve(16 << 10);
  m.file->run([&] {
    H5Handle g = h5::require_group(m.id(), "lora");
    h5::write_attr(g, "rank", li.rank);
    h5::write_attr(g, "alpha", li.alpha);
    h5::write_attr(g, "dropout", li.dropout);
    h5::write_attr(g, "targets", join(li.targets, ","));
    h5::write_attr(g, "base_path", li.base_path);
    h5::write_attr(g, "base_fingerprint", li.base_fingerprint);
  });
}

void CheckpointWriter::write_value_head_record(const ValueHeadRecord& info) {
  auto& m = *impl_;
  auto bcast_double = [&](double v) {  // as bytes, so every rank writes the identical attribute
    std::string s(reinterpret_cast<const char*>(&v), sizeof(v));
    s = bcast_string(m.comm, s);
    double out;
    std::memcpy(&out, s.data(), sizeof(out));
    return out;
  };
  const std::string type = bcast_string(m.comm, choice_name(kValueHeadTypeNames, info.type));
  const int64_t hidden = std::stoll(bcast_string(m.comm, std::to_string(info.hidden)));
  const double dropout = bcast_double(info.dropout), bias_init = bcast_double(info.bias_init);
  m.file->reserve(16 << 10);
  m.file->run([&] {
    H5Handle g = h5::require_group(m.id(), "value_head");
    h5::write_attr(g, "type", type);
    h5::write_attr(g, "hidden", hidden);
    h5::write_attr(g, "dropout", dropout);
    h5::write_attr(g, "bias_init", bias_init);
  });
}

void CheckpointWriter::close() {
  auto& m = *impl_;
  if (m.file && m.file->open()) m.file->close();
  m.watch.reset();
}

LoraRecord lora_record_for(const LoraConfig& cfg, std::string base_path, std::string base_fingerprint) {
  return {cfg.rank, cfg.alpha, cfg.dropout, lora_target_names(cfg), std::move(base_path), std::move(base_fingerprint)};
}

LoraConfig lora_config_of(const LoraRecord& info) {
  LoraConfig cfg;
  cfg.enabled = true;
  cfg.rank = info.rank;
  cfg.alpha = info.alpha;
  cfg.dropout = info.dropout;
  cfg.targets = info.targets;
  return cfg;
}

// ---------------------------------------------------------------------------------------------
// Checksums of small values, fingerprints

uint64_t train_state_checksum(const TrainState& state) { return fnv1a64(state.serialize()); }

uint64_t optimizer_step_checksum(int64_t step) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char(uint64_t(step) >> (8 * i) & 0xff);
  return fnv1a64(bytes);
}

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

void check_lora_base(const LoraRecord& info, const std::string& actual, const std::string& base_name) {
  if (info.base_fingerprint.empty() || actual == info.base_fingerprint) return;
  throw_input_identical("the LoRA adapters were trained on base '", info.base_path, "' (fingerprint ",
                        info.base_fingerprint, ") but ", base_name, " has fingerprint ", actual,
                        " (different weights, names or shapes)");
}

void check_lora_base(const LoraRecord& info, const CheckpointReader& base) {
  if (info.base_fingerprint.empty()) return;
  check_lora_base(info, model_fingerprint(base), "'" + base.header().path + "'");
}

std::string lora_base_fingerprint(const std::string& weights_path, const std::string& model_args_json, uint64_t seed) {
  if (weights_path.empty()) return "seed " + std::to_string(seed) + " " + model_fingerprint(model_args_json, {}, {});
  CheckpointReader r(weights_path, MPI_COMM_NULL);
  if (r.header().kind == CheckpointKind::Lora) {
    const std::optional<LoraRecord> li = r.read_lora_record();
    if (li && !li->base_path.empty()) return lora_base_fingerprint(li->base_path, model_args_json, seed);
  }
  return model_fingerprint(r);
}

std::string model_fingerprint(const CheckpointReader& base) {
  std::vector<TensorSpec> specs;
  std::vector<uint64_t> sums;
  for (const std::string& name : base.tensor_names(kModelGroup)) {
    specs.push_back({name, base.tensor_shape(kModelGroup, name)});
    auto sum = base.tensor_checksum(kModelGroup, name);
    if (!sum) throw_input("checkpoint '", base.header().path, "': /model/", name, " has no checksum attribute");
    sums.push_back(*sum);
  }
  return model_fingerprint(base.header().model_args_json, specs, sums);
}

}  // namespace wmtp
