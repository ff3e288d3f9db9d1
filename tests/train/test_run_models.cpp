// The models of a run (MPI tier, np 1-4): a model saved by a run at this world size comes back as a
// frozen model — every parameter frozen, weights equal to what was saved, forward equal to a plain
// single-process forward of those weights — both from a full checkpoint and from an adapters-only
// one applied on top of the base weights it records. The expected values are the seeded inits
// computed locally (no rank is a reference) and LocalParams forwards. An adapters-only model whose
// base file was replaced, or that lacks its adapters, is refused; a resume checks the frozen models its checkpoint records, and
// every part of the run before it reads a tensor.
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <ATen/ATen.h>

#include <filesystem>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/train_state.h"
#include "core/error.h"
#include "comm/mpi_communicator.h"
#include "model/local_params.h"
#include "model/mtp.h"
#include "rel_diff.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/run_models.h"
#include "train/run_state.h"
#include "train/train_checkpoint.h"

namespace wmtp::test {
namespace {

ShardingConfig fp32_sharding() {
  ShardingConfig c;
  c.param_dtype = at::kFloat;
  c.reduce_dtype = at::kFloat;
  return c;
}

// Saves `m` (trainable and frozen tensors, no optimizer) as step `step` of `dir`; returns the path.
std::string save_model(ModelHandle& m, CheckpointDir& dir, int64_t step, const LoraRecord* lora, bool adapters_only) {
  const TrainedModelState saved(m, lora, adapters_only);
  return save_training_checkpoint(dir, 0, mpi().world(), saved.header(step), {&saved});
}

// A backbone the frozen-model tests build on: tiny_args(2, 2) from `seed`, saved without LoRA as
// step 1 of `dir`.
struct SavedBase {
  ModelHandle model;
  std::string path;
};
SavedBase save_base(MpiCommunicator& comm, CheckpointDir& dir, uint64_t seed) {
  ModelSpec spec;
  spec.args = tiny_args(2, 2);
  SavedBase base{build_model(spec, comm, fp32_sharding(), seed), ""};
  base.path = save_model(base.model, dir, 1, nullptr, false);
  return base;
}

at::Tensor local_logits(const MtpModel& model, std::unordered_map<std::string, at::Tensor> weights,
                        const at::Tensor& tokens) {
  LocalParams local(model.param_specs(), std::move(weights));
  c10::NoGradGuard no_grad;
  return model.forward_logits(local, tokens, ForwardOptions{});
}

at::Tensor engine_logits(ModelHandle& m, const at::Tensor& tokens) {
  c10::NoGradGuard no_grad;
  return m.model->forward_logits(*m.engine, tokens, ForwardOptions{});
}

at::Tensor tokens_for_test() {
  at::manual_seed(3);
  return at::randint(0, tiny_args().vocab_size, {2, 11}, at::kLong);
}

TEST(RunModels, FrozenModelFromFullCheckpointEqualsSavedWeights) {
  MpiCommunicator comm(mpi().world());
  const std::string dir_path = shared_scratch_dir("run_models_full_np" + std::to_string(mpi().world_size()),
                                                  mpi().world());
  CheckpointDir dir(dir_path, mpi().world());

  ModelSpec policy;
  policy.args = tiny_args(2, 2);
  ModelHandle trained = build_model(policy, comm, fp32_sharding(), /*seed=*/7);
  const std::string path = save_model(trained, dir, 1, nullptr, false);

  ModelSpec spec = model_spec_from_checkpoint("reference", path);
  EXPECT_TRUE(spec.frozen);
  EXPECT_EQ(spec.args.dim, tiny_args().dim);
  EXPECT_EQ(spec.args.n_future_tokens, 2);
  EXPECT_FALSE(spec.lora.enabled);
  ModelHandle frozen = build_model(spec, comm, fp32_sharding(), /*seed=*/99);  // another init on purpose
  EXPECT_EQ(frozen.engine->plan().trainable_numel(), 0);
  load_model_weights(frozen, mpi().world());

  MtpModel reference(tiny_args(2, 2));
  auto expected = reference.init_params(7);
  auto got = frozen.engine->full_params();
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [fqn, t] : expected) EXPECT_TRUE(at::equal(got.at(fqn), t)) << fqn;

  const at::Tensor tokens = tokens_for_test();
  at::Tensor want = local_logits(reference, expected, tokens);
  at::Tensor have = engine_logits(frozen, tokens);
  EXPECT_LE(rel_diff(have, want), 1e-5);
}

TEST(RunModels, FrozenAdaptersOnlyCheckpointAppliesItsBase) {
  MpiCommunicator comm(mpi().world());
  const std::string dir_path = shared_scratch_dir("run_models_lora_np" + std::to_string(mpi().world_size()),
                                                  mpi().world());
  CheckpointDir base_dir(dir_path + "/base", mpi().world());
  CheckpointDir lora_dir(dir_path + "/lora", mpi().world());

  SavedBase base = save_base(comm, base_dir, /*seed=*/5);
  const std::string& base_path = base.path;

  // A LoRA run on that base whose adapters are non-zero (B random), saved adapters-only.
  ModelSpec lora_spec;
  lora_spec.args = tiny_args(2, 2);
  lora_spec.lora.enabled = true;
  lora_spec.lora.rank = 4;
  lora_spec.lora.alpha = 8.0;
  lora_spec.lora.targets = {"wq", "wv", "w2"};
  lora_spec.weights = base_path;
  ModelHandle run = build_model(lora_spec, comm, fp32_sharding(), /*seed=*/11);
  load_model_weights(run, mpi().world());
  MtpModel lora_model(tiny_args(2, 2), lora_spec.lora);
  auto expected = lora_model.init_params(11);
  MtpModel plain(tiny_args(2, 2));
  for (const auto& [fqn, t] : plain.init_params(5)) expected[fqn] = t;  // the base
  at::manual_seed(17);
  for (auto& [fqn, t] : expected)
    if (fqn.find(".lora_B") != std::string::npos) t = at::randn(t.sizes()) * 0.1;
  for (auto& p : run.engine->trainable_pieces()) {
    const at::Tensor flat = expected.at(p.name).reshape(-1);
    p.data.copy_(flat.narrow(0, p.offset, p.data.numel()));
  }
  run.engine->sync_replicas();
  LoraRecord info;
  info.rank = 4;
  info.alpha = 8.0;
  info.targets = {"wq", "wv", "w2"};
  info.base_path = base_path;
  const std::string path = save_model(run, lora_dir, 3, &info, /*adapters_only=*/true);

  ModelSpec spec = model_spec_from_checkpoint("critic", path);
  EXPECT_TRUE(spec.lora.enabled);
  EXPECT_EQ(spec.lora.rank, 4);
  EXPECT_EQ(spec.lora.targets, (std::vector<std::string>{"wq", "wv", "w2"}));
  ModelHandle frozen = build_model(spec, comm, fp32_sharding(), /*seed=*/99);
  EXPECT_EQ(frozen.engine->plan().trainable_numel(), 0);
  load_model_weights(frozen, mpi().world());

  auto got = frozen.engine->full_params();
  for (const auto& [fqn, t] : expected) EXPECT_TRUE(at::equal(got.at(fqn), t)) << fqn;
  const at::Tensor tokens = tokens_for_test();
  at::Tensor want = local_logits(lora_model, expected, tokens);
  at::Tensor have = engine_logits(frozen, tokens);
  EXPECT_LE(rel_diff(have, want), 1e-5);
}

TEST(RunModels, FrozenAdaptersOnlyCheckpointWithoutItsAdaptersIsRefused) {
  // A file of kind "lora" whose /lora record names adapters it does not hold (here: a model without
  // LoRA saved adapters-only): a frozen model read from it would run with seeded adapters, so the
  // load names the first adapter missing.
  MpiCommunicator comm(mpi().world());
  const std::string dir_path = shared_scratch_dir("run_models_noadapters_np" + std::to_string(mpi().world_size()),
                                                  mpi().world());
  CheckpointDir base_dir(dir_path + "/base", mpi().world());
  CheckpointDir lora_dir(dir_path + "/lora", mpi().world());
  SavedBase base = save_base(comm, base_dir, /*seed=*/5);
  const std::string& base_path = base.path;
  LoraRecord record;
  record.rank = 4;
  record.alpha = 8.0;
  record.targets = {"wq"};
  record.base_path = base_path;
  const std::string path = save_model(base.model, lora_dir, 2, &record, /*adapters_only=*/true);

  ModelSpec spec = model_spec_from_checkpoint("critic", path);
  ASSERT_TRUE(spec.lora.enabled);
  ModelHandle frozen = build_model(spec, comm, fp32_sharding(), /*seed=*/99);
  try {
    load_model_weights(frozen, mpi().world());
    ADD_FAILURE() << "a frozen model was loaded from an adapters-only file without its adapters";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
    EXPECT_NE(std::string(e.what()).find("lora_A"), std::string::npos) << e.what();
  }
}

TEST(RunModels, FrozenAdaptersOnAReplacedBaseAreRefused) {
  // An adapters-only critic is applied to the file its /lora names. When that file is replaced by
  // another model of the same shapes, the adapters would silently weigh with another backbone:
  // the base fingerprint the adapters recorded must refuse it, naming both fingerprints.
  MpiCommunicator comm(mpi().world());
  const std::string dir_path = shared_scratch_dir("run_models_replaced_base_np" + std::to_string(mpi().world_size()),
                                                  mpi().world());
  CheckpointDir base_dir(dir_path + "/base", mpi().world());
  CheckpointDir other_dir(dir_path + "/other", mpi().world());
  CheckpointDir lora_dir(dir_path + "/lora", mpi().world());
  SavedBase base = save_base(comm, base_dir, /*seed=*/5);
  const std::string& base_path = base.path;
  const std::string other_path = save_base(comm, other_dir, /*seed=*/6).path;

  ModelSpec lora_spec;
  lora_spec.args = tiny_args(2, 2);
  lora_spec.lora.enabled = true;
  lora_spec.lora.rank = 4;
  lora_spec.lora.targets = {"wq", "wv"};
  lora_spec.weights = base_path;
  ModelHandle run = build_model(lora_spec, comm, fp32_sharding(), /*seed=*/11);
  load_model_weights(run, mpi().world());
  LoraRecord info;
  info.rank = 4;
  info.alpha = 16.0;
  info.targets = {"wq", "wv"};
  info.base_path = base_path;
  info.base_fingerprint = lora_base_fingerprint(base_path, "", 11);  // what the trainer records
  const std::string path = save_model(run, lora_dir, 2, &info, /*adapters_only=*/true);

  ModelSpec spec = model_spec_from_checkpoint("critic", path);
  ModelHandle frozen = build_model(spec, comm, fp32_sharding(), /*seed=*/99);
  load_model_weights(frozen, mpi().world());  // its own base: fine
  EXPECT_EQ(frozen.fingerprint, weights_fingerprint(path, mpi().world()));
  const std::string before = frozen.fingerprint;

  if (mpi().rank() == 0)
    std::filesystem::copy_file(other_path, base_path, std::filesystem::copy_options::overwrite_existing);
  MPI_Barrier(mpi().world());
  EXPECT_NE(weights_fingerprint(path, mpi().world()), before);  // the adapters' file did not change; its model did
  ModelHandle again = build_model(spec, comm, fp32_sharding(), /*seed=*/99);
  try {
    load_model_weights(again, mpi().world());
    ADD_FAILURE() << "adapters applied to a replaced base";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.exit_code(), 2) << msg;
    EXPECT_TRUE(e.agreed()) << msg;  // every rank reads the same attributes: one message, clean exit
    EXPECT_NE(msg.find(info.base_fingerprint), std::string::npos) << msg;
    const std::string now = lora_base_fingerprint(base_path, "", 11);
    EXPECT_NE(msg.find(now), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
}

TEST(RunModels, ResumeRefusesAnotherFrozenModelUnlessAllowed) {
  // What a checkpoint records of the frozen models, and the resume's check against it.
  ModelHandle was;
  was.spec.role = "critic";
  was.spec.weights = "runs/critic/step_00000010.h5";
  was.spec.weights_key = "verifiable.critic";
  was.spec.override_key = "verifiable.resume_with_other_critic";
  was.fingerprint = "fnv1a64:1111111111111111";
  std::vector<ModelHandle> started;
  started.push_back(std::move(was));
  TrainState st;
  record_frozen_models(st, started);
  EXPECT_TRUE(check_frozen_models(st, started, "ckpt.h5").empty());

  std::vector<ModelHandle> now;
  now.emplace_back();
  now[0].spec = started[0].spec;
  now[0].spec.weights = "runs/critic/step_00000020.h5";  // the directory's `latest` moved on
  now[0].fingerprint = "fnv1a64:2222222222222222";
  try {
    check_frozen_models(st, now, "ckpt.h5");
    ADD_FAILURE() << "resumed against another critic";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.exit_code(), 2);
    for (const char* part : {"step_00000010.h5", "step_00000020.h5", "fnv1a64:1111111111111111",
                             "fnv1a64:2222222222222222", "verifiable.resume_with_other_critic"})
      EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  }
  now[0].spec.weights = started[0].spec.weights;  // the same file, rewritten with other weights
  EXPECT_THROW(check_frozen_models(st, now, "ckpt.h5"), Error);
  now[0].spec.allow_other_weights = true;  // the documented override: a warning instead
  const auto notes = check_frozen_models(st, now, "ckpt.h5");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("fnv1a64:2222222222222222"), std::string::npos) << notes[0];
  now[0].spec.allow_other_weights = false;
  now[0].spec.weights = "elsewhere/copy.h5";  // moved, same content: fine
  now[0].fingerprint = started[0].fingerprint;
  EXPECT_TRUE(check_frozen_models(st, now, "ckpt.h5").empty());
}

// A resume refuses before it reads a tensor: every part of the run is checked first, on the file's
// /train and attributes — here the frozen critic the checkpoint records has other weights now — so
// the trained model and the optimizer keep what they hold. With the critic the run started with, the
// same resume restores the saved weights, AdamW's moments and its step.
TEST(RunModels, ResumeChecksEveryPartBeforeReadingAnyTensor) {
  MpiCommunicator comm(mpi().world());
  const std::string dir_path = shared_scratch_dir("run_models_resume_np" + std::to_string(mpi().world_size()),
                                                  mpi().world());
  ModelSpec policy;
  policy.args = tiny_args(2, 2);
  ModelHandle trained = build_model(policy, comm, fp32_sharding(), /*seed=*/7);
  ShardedAdamW opt(*trained.engine, OptimizerConfig{});
  auto fill_state = [&](float params, float moments, int64_t step) {
    for (TensorPiece& p : trained.engine->trainable_pieces()) p.data.fill_(params);
    for (AdamState which : {AdamState::ExpAvg, AdamState::ExpAvgSq})
      for (TensorPiece& p : opt.state_pieces(which)) p.data.fill_(moments);
    opt.set_step_count(step);
  };
  auto holds = [&](float params, float moments) {
    bool same = true;
    for (const TensorPiece& p : trained.engine->trainable_pieces()) same = same && p.data.eq(params).all().item<bool>();
    for (AdamState which : {AdamState::ExpAvg, AdamState::ExpAvgSq})
      for (const TensorPiece& p : opt.state_pieces(which)) same = same && p.data.eq(moments).all().item<bool>();
    return same;
  };
  std::vector<ModelHandle> frozen;
  frozen.emplace_back();
  frozen[0].spec.role = "critic";
  frozen[0].spec.weights = "runs/critic/step_00000010.h5";
  frozen[0].spec.weights_key = "verifiable.critic";
  frozen[0].spec.override_key = "verifiable.resume_with_other_critic";
  frozen[0].fingerprint = "fnv1a64:1111111111111111";
  FrozenModelsState frozen_state;
  frozen_state.frozen = &frozen;
  TrainedModelState model_state(trained, nullptr, /*adapters_only=*/false);
  OptimizerState optimizer_state(opt, *trained.model, /*save=*/true);
  const std::vector<Checkpointed*> parts = {&frozen_state, &model_state, &optimizer_state};

  fill_state(0.5f, 0.25f, 3);
  {
    CheckpointDir dir(dir_path, mpi().world());
    save_training_checkpoint(dir, 0, mpi().world(), model_state.header(3),
                             {&frozen_state, &model_state, &optimizer_state});
  }
  CheckpointConfig cfg;
  cfg.dir = dir_path;
  fill_state(-1.0f, 0.0f, 0);
  frozen[0].fingerprint = "fnv1a64:2222222222222222";  // the critic's directory moved on
  EXPECT_THROW(resume_training(cfg, mpi().world(), parts), Error);
  EXPECT_TRUE(holds(-1.0f, 0.0f)) << "the refused checkpoint's tensors were read";
  EXPECT_EQ(opt.step_count(), 0);

  frozen[0].fingerprint = "fnv1a64:1111111111111111";
  const Resumed r = resume_training(cfg, mpi().world(), parts);
  EXPECT_EQ(r.path, dir_path + "/" + checkpoint_file_name(3));
  EXPECT_TRUE(holds(0.5f, 0.25f));
  EXPECT_EQ(opt.step_count(), 3);
}

TEST(RunModels, FrozenModelRequiresEveryTensor) {
  // A frozen critic with a value head cannot come from a file without one: no silent zero head.
  MpiCommunicator comm(mpi().world());
  const std::string dir_path = shared_scratch_dir("run_models_missing_np" + std::to_string(mpi().world_size()),
                                                  mpi().world());
  CheckpointDir dir(dir_path, mpi().world());
  ModelSpec policy;
  policy.args = tiny_args(3, /*n_future=*/1);  // a value head reads a next-token model
  ModelHandle trained = build_model(policy, comm, fp32_sharding(), 7);
  const std::string path = save_model(trained, dir, 1, nullptr, false);
  ModelSpec spec = model_spec_from_checkpoint("critic", path);
  EXPECT_FALSE(spec.value_head.enabled);  // no /value_head, no value_head.* tensors
  spec.value_head.enabled = true;
  ModelHandle frozen = build_model(spec, comm, fp32_sharding(), 7);
  EXPECT_THROW(load_model_weights(frozen, mpi().world()), Error);
}

}  // namespace
}  // namespace wmtp::test
