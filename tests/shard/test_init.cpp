// Sharded start-up (mpirun -np 1..4): each rank initializes only the elements it holds
// (ShardedModel::init_shards with MtpModel::init_range), and the union of the shards equals the
// single-process init_params bit for bit — fp32 masters, bf16 frozen shards (LoRA base weights),
// the value head — for every strategy; the engine starts from it exactly as from load_full.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "shard/sharded_model.h"
#include "shard_test_util.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

constexpr uint64_t kSeed = 23;

void init_engine(const MtpModel& model, ShardedModel& engine, uint64_t seed) {
  engine.init_shards(
      [&](const std::string& fqn, int64_t offset, const at::Tensor& out) { model.init_range(fqn, offset, out, seed); });
}

TEST(ShardInit, UnionOfShardsEqualsSingleProcessInitBitwise) {
  ValueHeadConfig vh;
  vh.enabled = true;
  vh.bias_init = 0.25;
  for (bool lora : {false, true})
    for (std::string strategy : {"full_shard", "no_shard"})
      for (std::string dtype : {"bf16", "fp32"}) {
        // without LoRA: a value model (n_future 1, value head instead of the output projection)
        ModelArgs args = tiny_mtp_args();
        if (!lora) args.n_future_tokens = 1;
        MtpModel model(args, lora ? tiny_lora() : LoraConfig{}, lora ? ValueHeadConfig{} : vh);
        ShardingConfig sc;
        test::set_config(sc, "strategy=" + strategy);
        test::set_config(sc, "param_dtype=" + dtype);
        ShardedModel engine(model.param_specs(), world_comm(), sc);
        init_engine(model, engine, kSeed);
        const auto want = model.init_params(kSeed);  // one process, whole tensors
        const auto got = engine.full_params();
        const std::string what = strategy + " " + dtype + (lora ? " lora" : " value head");
        ASSERT_EQ(got.size(), want.size()) << what;
        for (const ParamSpec& s : model.param_specs()) {
          // frozen parameters are stored in param_dtype: the fp32 init rounded once
          const at::Tensor expected = s.trainable ? want.at(s.fqn) : want.at(s.fqn).to(sc.param_dtype).to(at::kFloat);
          EXPECT_TRUE(at::equal(got.at(s.fqn), expected)) << what << ": " << s.fqn;
        }
      }
}

TEST(ShardInit, StepsFromShardInitEqualStepsFromLoadFull) {
  MtpModel model(tiny_mtp_args());
  ShardingConfig sc;
  sc.param_dtype = at::kFloat;
  ShardedModel a(model.param_specs(), world_comm(), sc), b(model.param_specs(), world_comm(), sc);
  init_engine(model, a, kSeed);
  b.load_full(model.init_params(kSeed));
  MtpBatch batch = make_batch(global_batch(kSeed, world_comm().rank(), 4, model.args().vocab_size));
  std::vector<double> counts(static_cast<size_t>(model.n_future()), 10.0);
  mtp_forward_backward(model, a, batch, counts, MtpPassOptions{});
  mtp_forward_backward(model, b, batch, counts, MtpPassOptions{});
  a.reduce_gradients();
  b.reduce_gradients();
  const auto ga = a.full_grads(), gb = b.full_grads();
  for (const auto& [fqn, g] : gb) EXPECT_TRUE(at::equal(ga.at(fqn), g)) << fqn;
}

}  // namespace
}  // namespace wmtp::test
