// The models of a run: built from their ModelSpec through the sharding engine, initialised, and
// loaded from checkpoints saved at any world size. One place for every train-* program, so a
// trained policy, a frozen critic and a frozen reference are sharded and loaded the same way.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>

#include "train/pipeline.h"

namespace wmtp {

class Communicator;
struct ShardingConfig;

// The spec of a model stored in a checkpoint: its args, its LoRA adapters (from /lora), its value
// head (from /value_head: a train-critic checkpoint), frozen.
// `role` names it in messages. Reads attributes only (every rank reads the same file).
ModelSpec model_spec_from_checkpoint(const std::string& role, const std::string& path);

// MtpModel + ShardedModel for `spec` (every parameter frozen when spec.frozen), weights at the
// seeded init, shards on `device`; no communication.
ModelHandle build_model(const ModelSpec& spec, Communicator& comm, const ShardingConfig& sharding, uint64_t seed,
                        c10::Device device = c10::Device(c10::kCPU));

// Loads spec.weights (if any) into the engine. An adapters-only ("lora") checkpoint is loaded on
// top of the base weights it records. Collective over `comm`. Missing tensors follow
// LoadPurpose::InitialWeights for the trained model and are errors for frozen ones.
void load_model_weights(ModelHandle& m, MPI_Comm comm);

// "policy: 12.3M params (12.3M trainable), dim 64, 6 layers, n_future 4, LoRA r8" for logs.
std::string describe_model(const ModelHandle& m);

}  // namespace wmtp
