// The models of a run: built from their ModelSpec through the sharding engine, initialized, and
// loaded from checkpoints saved at any world size. One place for every train-* program, so a
// trained policy, a frozen critic and a frozen reference are sharded and loaded the same way.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "train/pipeline.h"

namespace wmtp {

class Communicator;
class TrainState;
struct ShardingConfig;
struct ShardGroups;

// The spec of a model stored in a checkpoint: its args, its LoRA adapters (from /lora), its value
// head (from /value_head: a train-critic checkpoint), frozen.
// `role` names it in messages. Reads attributes only (every rank reads the same file).
ModelSpec model_spec_from_checkpoint(const std::string& role, const std::string& path);

// MtpModel + ShardedModel for `spec` (every parameter frozen when spec.frozen), weights at the
// seeded init, shards on `device`; no communication. `groups`: a hybrid strategy's communicators
// (ShardedModel's constructor).
ModelHandle build_model(const ModelSpec& spec, Communicator& comm, const ShardingConfig& sharding, uint64_t seed,
                        c10::Device device = c10::Device(c10::kCPU), const ShardGroups* groups = nullptr);

// Loads spec.weights (if any) into the engine and sets m.fingerprint. An adapters-only ("lora")
// checkpoint is loaded on top of the base weights it records, which must still be the base the
// adapters were trained on (the base fingerprint /lora records; Error(Input) naming both otherwise).
// Collective over `comm`. What the files must hold: LoadPurpose::InitialWeights (an adapters-only
// file: InitialAdapters) for the trained model, FrozenWeights for a frozen one.
void load_model_weights(ModelHandle& m, MPI_Comm comm);

// The content fingerprint of a weights file from its checksum table (model_fingerprint: no weight
// is read), for an adapters-only file combined with that of the base it records. Every rank reads
// the same attributes (collective over `comm`).
std::string weights_fingerprint(const std::string& path, MPI_Comm comm);

// Which frozen models a run trains against, in /train of every checkpoint it saves:
// frozen.<role>.weights (the resolved file) and frozen.<role>.fingerprint (weights_fingerprint).
void record_frozen_models(TrainState& st, const std::vector<ModelHandle>& frozen);
// On resume: every frozen model must have the fingerprint the checkpoint records (a critic
// directory whose `latest` moved on, a reference file overwritten...). Otherwise an Error(Input)
// naming the key, both files and both fingerprints, unless the model's spec allows other weights:
// then (and for checkpoints that record nothing) the returned notes say what changed.
std::vector<std::string> check_frozen_models(const TrainState& st, const std::vector<ModelHandle>& frozen,
                                             const std::string& checkpoint);

// A frozen model must read the training data's token ids: the tokenizer fingerprint its checkpoint's
// /train records (every trainer writes data.tokenizer_fingerprint) against [data] train's. Throws a
// Local Error(Input) naming `key`, the checkpoint, the data file and both tokenizers when they differ;
// returns a note when the checkpoint records none (imported weights), "" when they match.
std::string check_frozen_tokenizer(const std::string& key, const std::string& checkpoint,
                                   const std::string& data_train);

// "policy: 12.3M params (12.3M trainable), dim 64, 6 layers, n_future 4, LoRA r8" for logs.
std::string describe_model(const ModelHandle& m);

}  // namespace wmtp
