// The reshard matrix (mpirun -np 6): a checkpoint saved under each of five layouts — np 1 no_shard,
// np 2 full_shard, np 4 full_shard, np 4 hybrid 2 x 2, np 6 hybrid 3 x 2 (each on the first ranks
// of the job) — is resumed under each of the five, through the trainer's own loader
// (load_training_checkpoint: every rank reads the pieces it owns, the replicas share them). The
// next steps' losses, and the parameters after them, must be bitwise those of the same target
// layout resumed from the same file independently: every tensor read whole (CheckpointReader::
// read_tensor) and handed to the engine as full values (load_full, and the moments as whole-tensor
// pieces), so that no saved or loaded layout enters. A scrambled element — a piece read at a wrong
// offset, a replica left with stale values, padding counted as data — changes the next loss.
// The model is the tiny MTP model with LoRA (trainable adapters, frozen base: both kinds of
// shards), fp32; 2 steps before the save and 2 after.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_util.h"
#include "model/mtp_loss.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "shard_test_util.h"
#include "test_util.h"
#include "train/pipeline.h"
#include "train/train_checkpoint.h"

namespace wmtp::test {
namespace {

constexpr uint64_t kSeed = 21;
constexpr int kGlobalBatch = 24;  // 2 micro-batches per rank at 1, 2, 4 and 6 ranks
constexpr int kMicro = 2;
constexpr int kSaveSteps = 2, kResumeSteps = 2;

struct Layout {
  std::string name;
  int ranks;
  std::string strategy;
  int group_size = 0;  // hybrid
};
const std::vector<Layout> kLayouts = {{"np1 no_shard", 1, "no_shard"},
                                      {"np2 full_shard", 2, "full_shard"},
                                      {"np4 full_shard", 4, "full_shard"},
                                      {"np4 hybrid 2x2", 4, "hybrid_shard", 2},
                                      {"np6 hybrid 3x2", 6, "hybrid_shard", 3}};

OptimizerConfig optimizer() {
  OptimizerConfig c;
  c.lr = 1e-3;
  c.weight_decay = 0.1;
  c.max_grad_norm = 1.0;
  return c;
}

// The layout's ranks (the first `ranks` of the job) and their communicators; other ranks get none.
struct Ranks {
  MPI_Comm comm = MPI_COMM_NULL;
  std::unique_ptr<MpiCommunicator> world;
  std::unique_ptr<ShardGroups> groups;
  ShardingConfig sharding;
  explicit Ranks(const Layout& l) {
    const int rank = mpi().rank();
    MPI_Comm_split(mpi().world(), rank < l.ranks ? 0 : MPI_UNDEFINED, rank, &comm);
    if (comm == MPI_COMM_NULL) return;
    world = std::make_unique<MpiCommunicator>(comm);
    set_config(sharding, "strategy=" + l.strategy);
    sharding.param_dtype = at::kFloat;
    if (l.group_size > 0) groups = shard_groups(comm, l.group_size);
  }
  ~Ranks() {
    groups.reset();
    world.reset();
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
  bool member() const { return comm != MPI_COMM_NULL; }
};

struct Trainee {
  ModelHandle handle;  // what the trainer's checkpointed model part holds
  ShardedModel* engine = nullptr;
  std::unique_ptr<ShardedAdamW> opt;
  Trainee(const MtpModel& model, Ranks& r) {
    handle.model = std::make_unique<MtpModel>(model.args(), model.lora(), model.value_head());
    handle.engine = std::make_unique<ShardedModel>(model.param_specs(), *r.world, r.sharding, c10::Device(c10::kCPU),
                                                   r.groups.get());
    engine = handle.engine.get();
    opt = std::make_unique<ShardedAdamW>(*engine, optimizer());
  }
};

// Optimizer steps [first, first + n) on the global batches of those steps; the losses.
std::vector<double> train(const MtpModel& model, Trainee& run, Communicator& comm, int first, int n) {
  MtpPassOptions so;
  so.sequential_unembedding = true;
  std::vector<double> losses;
  for (int s = first; s < first + n; ++s) {
    const auto global = global_batch(kSeed, s, kGlobalBatch, model.args().vocab_size);
    const auto counts = count_valid_targets(make_batch(global).labels, model.n_future());
    const std::vector<double> total(counts.begin(), counts.end());
    run.opt->zero_grad();
    double loss = 0;
    for (const MtpBatch& b : rank_micro_batches(global, comm.rank(), comm.size(), kMicro))
      loss += mtp_forward_backward(model, *run.engine, b, total, so).loss;
    losses.push_back(comm.all_reduce_scalar(loss, ReduceOp::Sum));
    run.opt->clip_grad_norm();
    run.opt->step();
  }
  return losses;
}

// The independent resume: every tensor whole, into the engine as full values.
void load_whole(const std::string& path, MPI_Comm comm, const MtpModel& model, Trainee& run) {
  CheckpointReader r(path, comm);
  std::unordered_map<std::string, at::Tensor> params;
  for (const ParamSpec& s : model.param_specs()) params[s.fqn] = r.read_tensor(kModelGroup, s.fqn);
  run.engine->load_full(params);
  for (AdamState which : {AdamState::ExpAvg, AdamState::ExpAvgSq}) {
    std::vector<TensorPiece> whole;
    for (const ParamSpec& s : model.param_specs())
      if (s.trainable)
        whole.push_back({s.fqn, 0, r.read_tensor(which == AdamState::ExpAvg ? kExpAvgGroup : kExpAvgSqGroup, s.fqn)});
    run.opt->load_state_pieces(which, whole);
  }
  run.opt->set_step_count(r.header().optimizer_step);
}

bool bitwise(const std::unordered_map<std::string, at::Tensor>& a, const std::unordered_map<std::string, at::Tensor>& b,
             std::string* first_diff) {
  for (const auto& [k, v] : b)
    if (!a.count(k) || !at::equal(a.at(k), v)) {
      *first_diff = k;
      return false;
    }
  return true;
}

TEST(ReshardMatrix, EveryLayoutResumesEveryOthersCheckpointBitwise) {
  ASSERT_EQ(mpi().world_size(), 6) << "the matrix's largest layout has 6 ranks";
  const MtpModel model(tiny_mtp_args(), tiny_lora());
  const std::string dir = shared_scratch_dir("reshard_matrix", mpi().world());

  std::vector<std::string> saved;  // per source layout: its checkpoint
  for (const Layout& l : kLayouts) {
    Ranks r(l);
    std::string path;
    if (r.member()) {
      Trainee run(model, r);
      run.engine->load_full(model.init_params(kSeed));
      train(model, run, *r.world, 0, kSaveSteps);
      CheckpointDir ckpt(dir + "/" + std::to_string(saved.size()), r.comm);
      const TrainedModelState model_part(run.handle, nullptr, /*adapters_only=*/false);
      const OptimizerState optimizer_part(*run.opt, model, /*save=*/true);
      path = save_training_checkpoint(ckpt, 0, r.comm, model_part.header(kSaveSteps), {&model_part, &optimizer_part});
    }
    saved.push_back(bcast_string(mpi().world(), path, 0));
  }

  int pairs = 0;
  for (const Layout& target : kLayouts) {
    Ranks r(target);
    if (!r.member()) {
      barrier(mpi().world());
      continue;
    }
    for (size_t from = 0; from < kLayouts.size(); ++from) {
      const std::string what = kLayouts[from].name + " -> " + target.name;
      Trainee resumed(model, r), whole(model, r);
      // The trainer's resume: its model and optimizer parts from the file `resume` names.
      CheckpointConfig resume;
      resume.dir = dir + "/" + std::to_string(from);
      resume.resume = saved[from];
      TrainedModelState model_part(resumed.handle, nullptr, /*adapters_only=*/false);
      OptimizerState optimizer_part(*resumed.opt, model, /*save=*/true);
      resume_training(resume, r.comm, {&model_part, &optimizer_part});
      load_whole(saved[from], r.comm, model, whole);
      const std::vector<double> got = train(model, resumed, *r.world, kSaveSteps, kResumeSteps);
      const std::vector<double> want = train(model, whole, *r.world, kSaveSteps, kResumeSteps);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_EQ(std::memcmp(&got[i], &want[i], sizeof(double)), 0)
            << what << ": loss of step " << kSaveSteps + i + 1 << " " << got[i] << " after the resume, " << want[i]
            << " from the whole tensors";
      std::string diff;
      EXPECT_TRUE(bitwise(resumed.engine->full_params(), whole.engine->full_params(), &diff))
          << what << ": parameter " << diff << " differs after " << kResumeSteps << " steps";
      ++pairs;
    }
    barrier(mpi().world());
  }
  if (mpi().rank() == 0) {
    EXPECT_EQ(pairs, 25);  // rank 0 belongs to every layout
  }
}

}  // namespace
}  // namespace wmtp::test
