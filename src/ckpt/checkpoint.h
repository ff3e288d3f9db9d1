// Checkpoint file format v1 (docs/checkpoint-format.md): one HDF5 file per checkpoint, written
// collectively by every rank through MPI-IO, readable at any world size.
//
// The API is engine-agnostic. A tensor is described by a TensorSpec (name, full logical shape; the
// same list, in the same order, on every rank). Each rank contributes TensorPieces (core/tensor_piece.h;
// float32 data, CPU or GPU): contiguous ranges
// [offset, offset+numel) of a tensor's row-major flattened elements — exactly what a sharding engine
// owns when its flat buffer is the concatenation of parameters, padded, with rank r owning slice r.
// Ranges may be empty, a rank may hold several pieces of one tensor (non-overlapping), and the ranges
// read back need not be those written: load at any world size M.
//
//   CheckpointWriter w(tmp_path, comm, {CheckpointKind::Full, args_json, step});  // collective
//   w.write_tensors(kModelGroup, specs, my_param_pieces);                  // collective
//   w.write_tensors(kExpAvgGroup, opt_specs, my_exp_avg_pieces);
//   w.write_tensors(kExpAvgSqGroup, opt_specs, my_exp_avg_sq_pieces);
//   w.write_optimizer_step(adam_step);  w.write_train_state(st);  w.write_config_toml(toml);
//   w.close();                                                             // flush + close (collective)
//
//   CheckpointReader r(path, comm);                                        // collective; validates
//   r.read_tensors(kModelGroup, specs, my_pieces);                         // fills piece.data in place
//
// Every call is collective over `comm` (pass MPI_COMM_NULL for one process with serial HDF5).
// Errors about the file (missing, not a wmtp checkpoint, unsupported version, missing tensor, shape
// mismatch, truncated/corrupt) are Error(Input) naming the file and the problem; those every rank
// sees identically are thrown by every rank (Reach::Identical or Agreed: printed once).
#pragma once
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/store_dtype.h"
#include "ckpt/train_state.h"
#include "core/tensor_piece.h"
#include "model/lora.h"
#include "model/value_head.h"

namespace wmtp {

struct ParamSpec;

inline constexpr const char* kCheckpointFormat = "wmtp-checkpoint";
inline constexpr int64_t kCheckpointVersion = 1;
inline constexpr const char* kModelGroup = "model";
inline constexpr const char* kExpAvgGroup = "optim/exp_avg";
inline constexpr const char* kExpAvgSqGroup = "optim/exp_avg_sq";

struct TensorSpec {
  std::string name;            // FQN, e.g. "layers.0.attention.wq.weight"
  std::vector<int64_t> shape;  // full logical shape
};

std::vector<TensorSpec> tensor_specs_from(const std::vector<ParamSpec>& params);

// What a checkpoint holds: a run's training state (its model, optimizer and /train), a model's
// weights only, or LoRA adapters only (on the base /lora names). The root attribute "kind" spells it
// as in kCheckpointKindNames.
enum class CheckpointKind { Full, Model, Lora };
inline const std::vector<std::string> kCheckpointKindNames = {"full", "model", "lora"};

// The root attributes of a checkpoint: one type for writing and reading. The writer takes `kind`,
// `model_args_json` and `step` from the caller (rank 0's values) and sets the rest itself; the reader
// fills every field (CheckpointReader::header()).
struct CheckpointHeader {
  CheckpointKind kind = CheckpointKind::Full;
  std::string model_args_json;  // ModelArgs as JSON text (model_args_to_json)
  int64_t step = 0;
  // Set by the writer, read back:
  std::string path;  // the file read (not an attribute)
  int64_t version = 0;
  std::string created;          // ISO 8601 UTC
  std::string toolkit_version;  // WMTP_VERSION of the writer
  int64_t world_size = 0;       // ranks that wrote it
  bool has_optimizer = false;
  int64_t optimizer_step = 0;

  CheckpointHeader() = default;
  CheckpointHeader(CheckpointKind k, std::string args_json, int64_t at_step)
      : kind(k), model_args_json(std::move(args_json)), step(at_step) {}
};

// LoRA run description stored in /lora (full and adapter-only checkpoints of LoRA runs).
struct LoraRecord {
  int64_t rank = 0;
  double alpha = 0.0;
  double dropout = 0.0;
  std::vector<std::string> targets;  // "wq", "wk", ... (Meta module names)
  std::string base_path;             // the base weights this adapter was trained on
  std::string base_fingerprint;      // model_fingerprint() of that base ("" if unknown)
  bool operator==(const LoraRecord& o) const {
    return rank == o.rank && alpha == o.alpha && dropout == o.dropout && targets == o.targets &&
           base_path == o.base_path && base_fingerprint == o.base_fingerprint;
  }
};

// The record of a LoRA run with `cfg` (targets in their canonical Meta names; Error(Usage) for an
// unknown one) on the base `base_path` with `base_fingerprint`; and back, the [lora] settings a record
// describes (enabled).
LoraRecord lora_record_for(const LoraConfig& cfg, std::string base_path, std::string base_fingerprint);
LoraConfig lora_config_of(const LoraRecord& info);

// Value head of a value model (the critic), stored in /value_head attributes; absent otherwise.
// Enough to rebuild the model from the file alone (hidden = the backbone's dim it reads).
struct ValueHeadRecord {
  ValueHeadType type = ValueHeadType::Mlp;  // attribute "type", spelled as in kValueHeadTypeNames
  int64_t hidden = 0;
  double dropout = 0.0;
  double bias_init = 0.0;
  bool operator==(const ValueHeadRecord& o) const {
    return type == o.type && hidden == o.hidden && dropout == o.dropout && bias_init == o.bias_init;
  }
};

class CheckpointWriter {
 public:
  // Creates (truncates) `path` and writes the root attributes.
  CheckpointWriter(const std::string& path, MPI_Comm comm, const CheckpointHeader& header);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // One dataset /<group>/<spec.name> per spec, full shape, stored as float32 (or bfloat16, rounded
  // to nearest even), with attributes torch_dtype and checksum (checksum.h). Every element should be
  // covered by exactly one rank's piece; uncovered elements are undefined (never filled).
  void write_tensors(const std::string& group, const std::vector<TensorSpec>& specs,
                     const std::vector<TensorPiece>& pieces, StoreDtype dtype = StoreDtype::Float32);
  void write_optimizer_step(int64_t step);                    // attribute "step" of /optim
  void write_train_state(const TrainState& state);            // /train/<key>; rank 0's state
  void write_config_toml(const std::string& toml);            // /meta/config_toml; rank 0's text
  void write_lora_record(const LoraRecord& info);             // /lora attributes; rank 0's
  void write_value_head_record(const ValueHeadRecord& info);  // /value_head attributes; rank 0's

  // Flushes (MPI_File_sync) and closes. Without close(), the destructor closes without the
  // guarantee (error paths).
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// How a reader moves data. Independent (default): each rank reads its own ranges and the metadata
// it needs on its own — no per-tensor synchronization, which measured faster (bench-checkpoint-io)
// and suits the large contiguous range each rank of the engine layout reads. Collective: collective
// metadata reads (rank 0 reads, broadcasts) and MPI-IO collective transfers, for very large jobs
// where thousands of independent metadata reads would hammer a parallel file system.
enum class ReadMode { Independent, Collective };

struct ReadOptions {
  ReadMode mode = ReadMode::Independent;
  // Check what is read against the checksums written with it (docs/checkpoint-format.md §2): each
  // tensor read by read_tensors/read_tensor, /train and the optimizer step. A mismatch is an agreed
  // Error(Input) naming the file and the tensors. Off only to measure its cost (bench-checkpoint-io).
  bool verify = true;
};

// What verify_checksums() found: how many tensors it checked, and the bad ones ("model/x", "train").
struct ChecksumReport {
  int64_t tensors = 0;
  std::vector<std::string> mismatched;
};

class CheckpointReader {
 public:
  CheckpointReader(const std::string& path, MPI_Comm comm, ReadOptions options = {});
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const CheckpointHeader& header() const;
  bool has_tensor(const std::string& group, const std::string& name) const;
  std::vector<std::string> tensor_names(const std::string& group) const;  // write order; {} if no group
  std::vector<int64_t> tensor_shape(const std::string& group, const std::string& name) const;
  std::string tensor_dtype(const std::string& group, const std::string& name) const;  // "float32", ...
  std::optional<uint64_t> tensor_checksum(const std::string& group, const std::string& name) const;

  // Checks every spec against the file, reading no data: a missing tensor, another shape, or (when
  // verifying) no checksum to verify it by is an Error(Input) naming the tensor, the same on every
  // rank. read_tensors runs the same checks first.
  void check_tensors(const std::string& group, const std::vector<TensorSpec>& specs) const;
  // Validates every spec against the file first (check_tensors), then reads each rank's pieces with one read per tensor. A piece's `data` must be a 1-D float32
  // tensor whose length is the range to read (e.g. a view into the engine's flat buffer); it is
  // filled in place. bfloat16 datasets are widened exactly. With verification (the default), the
  // ranks checksum what they read (each element once; elements no rank asked for are read once
  // more by someone) and one all-reduce gives every rank the verdict: a corrupt tensor is an agreed
  // Error(Input) after the read (the pieces then hold the corrupt data).
  void read_tensors(const std::string& group, const std::vector<TensorSpec>& specs,
                    std::vector<TensorPiece>& pieces) const;
  // The whole tensor, shaped, as float32 (every rank reads all of it, and verifies it alone: the
  // error is not agreed).
  at::Tensor read_tensor(const std::string& group, const std::string& name) const;
  // The whole tensor in its stored dtype (float32 or bfloat16; other floats come back float32).
  at::Tensor read_tensor_stored(const std::string& group, const std::string& name) const;

  TrainState read_train_state() const;  // empty if the file has no /train; verified
  std::optional<std::string> read_config_toml() const;
  std::optional<LoraRecord> read_lora_record() const;
  std::optional<ValueHeadRecord> read_value_head_record() const;

  // Re-computes the checksum of every dataset that has one, in any group layout (each rank reads an
  // equal share of each), and checks /train and the optimizer step; the same report on every rank.
  // A dataset under /model or /optim without a checksum is reported too. Collective.
  ChecksumReport verify_checksums() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Fingerprint of a base model: canonical model args, every /model tensor's name, shape and
// checksum. LoRA checkpoints record it; loading an adapter onto another base is then detected.
std::string model_fingerprint(const CheckpointReader& base);
// Throws an agreed Error(Input) naming both fingerprints when `info` records a base fingerprint that
// `base` does not have (every rank computes the same: the verdict is agreed).
void check_lora_base(const LoraRecord& info, const CheckpointReader& base);
// The same against a fingerprint computed elsewhere; `base_name` says where it comes from.
void check_lora_base(const LoraRecord& info, const std::string& actual_fingerprint, const std::string& base_name);
// The fingerprint a LoRA run records for its base (LoraRecord::base_fingerprint): that of the weights
// file the base comes from (for an adapters-only file, of the base it names), or, for a base made by
// the seeded init, one that names the seed and the model args. Reads attributes only (one process).
std::string lora_base_fingerprint(const std::string& weights_path, const std::string& model_args_json, uint64_t seed);
// Checksums of the small values a resume depends on (docs/checkpoint-format.md §1): the /train
// group's (FNV-1a of TrainState::serialize(), i.e. of its keys, types and values) and the optimizer
// step's (FNV-1a of its 8 little-endian bytes).
uint64_t train_state_checksum(const TrainState& state);
uint64_t optimizer_step_checksum(int64_t step);

std::string model_fingerprint(const std::string& model_args_json, const std::vector<TensorSpec>& specs,
                              const std::vector<uint64_t>& checksums);

}  // namespace wmtp
