// The step-time model: the engine's schedule of one step replayed on a compute timeline and the
// communicators' queues (see step_time.h for the rules it follows and where they live in the engine).
#include "plan/step_time.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>

#include "core/choice_names.h"
#include "core/error.h"
#include "plan/collective_time.h"
#include "plan/pass_flops.h"

namespace wmtp {

namespace {

// AdamW reads p, g, m, v and writes p, m, v (7 x 4 B); the gradient is zeroed (4 B) and read for
// the clip's norm (4 B); a bf16 run casts the new masters for the next gathers (read 4 B, write 2 B).
constexpr double kOptimizerBytes = 7 * 4 + 4 + 4;
constexpr double kCastBytes = 4 + 2;
// Unrelated small all-reduces of every step: the global token counts before the forward and the
// gradient norm's partial sums with the step's figures (a few dozen doubles).
constexpr int64_t kSmallAllReduceBytes = 256;
// Reductions in flight before the backward waits for the oldest (shard/sharded_model.cpp).
constexpr size_t kMaxPendingReduces = 2;

// One communicator: collectives run one at a time in the order posted.
struct CommQueue {
  struct Item {
    int id;
    double remaining;
  };
  std::deque<Item> items;
  // Spends `dt` seconds at `rate` on the queue's head items.
  void progress(double dt, double rate) {
    double work = dt * rate;
    while (work > 0 && !items.empty()) {
      const double used = std::min(work, items.front().remaining);
      items.front().remaining -= used;
      work -= used;
      if (items.front().remaining <= 0) items.pop_front();
    }
  }
  bool done(int id) const {
    return std::none_of(items.begin(), items.end(), [&](const Item& i) { return i.id == id; });
  }
  // Seconds at full rate until `id` is done.
  double time_to(int id) const {
    double t = 0;
    for (const Item& i : items) {
      t += i.remaining;
      if (i.id == id) return t;
    }
    return 0;
  }
};

// The rank's clock and its communicators (the engine's and, for hybrid sharding, the replicas').
class Timeline {
 public:
  explicit Timeline(double overlap) : overlap_(overlap) {}
  double now() const { return now_; }
  int post(int queue, double seconds) {
    queues_[queue].items.push_back({next_id_, seconds});
    return next_id_++;
  }
  void compute(double seconds) {
    for (CommQueue& q : queues_) q.progress(seconds, overlap_);
    now_ += seconds;
    computed_ += seconds;
  }
  // The rank waits for collective `id`; everything queued progresses at full speed meanwhile.
  void wait(int queue, int id) {
    const double dt = queues_[queue].time_to(id);
    for (CommQueue& q : queues_) q.progress(dt, 1.0);
    now_ += dt;
  }
  void wait_all() {
    for (int q = 0; q < 2; ++q)
      while (!queues_[q].items.empty()) wait(q, queues_[q].items.back().id);
  }
  double computed() const { return computed_; }

 private:
  double overlap_;
  double now_ = 0, computed_ = 0;
  CommQueue queues_[2];
  int next_id_ = 0;
};

constexpr int kEngineQueue = 0, kReplicaQueue = 1;

// One unit pass of a micro-batch in the engine's order.
struct Op {
  int unit = -1;
  double flops = 0;
  bool gather = false;   // needs its unit gathered first (prefetched, or posted now)
  int list = -1;         // the prefetch order it is in (0: forward, 1: backward re-gathers)
  int pos = -1;          // its place in that order; -1 with `trigger`: prefetch from the start
  bool trigger = false;  // a begin_unit or backward hook: prefetches the next gathers of `list`
  bool reduce = false;   // posts its unit's gradient reduction at its end
};

// What one model's engine does: its units, ops per micro-batch, prefetch orders and state.
struct EngineRun {
  std::vector<UnitWork> units;
  std::vector<Op> ops;
  std::vector<int> lists[2];
  int depth = 0;
  // prefetch state, per micro-batch
  int pending = 0, next[2] = {0, 0};
  std::map<std::pair<int, int>, int> posted;  // (list, pos) -> collective id
};

struct Costs {
  const StepTimeInput* in;
  int64_t param_bytes, reduce_bytes;
  GroupSpan group, world, replicas;
  std::map<std::string, CollectiveTotal> totals;
  double bus_intra = 0, bus_inter = 0;

  double cost(const std::string& what, Collective c, int64_t bytes, const GroupSpan& g) {
    const CollectiveCost k = collective_cost(c, bytes, g, in->machine);
    CollectiveTotal& t = totals[what];
    t.what = what, t.link = k.link, t.group = g.ranks;
    ++t.count, t.bytes += bytes, t.seconds += k.seconds;
    // What a rank sends to its ring successor (comm/link_bytes.h); a ring over several nodes has
    // ranks that send it all across nodes and, with several ranks per node, others all inside.
    const double bus = busbw_factor(c, g.ranks) * double(bytes);
    if (g.nodes > 1) bus_inter += bus;
    if (g.per_node() > 1) bus_intra += bus;
    return k.seconds;
  }
};

bool gathers(const StepTimeInput& in, int group) { return in.sharding.strategy != ShardStrategy::NoShard && group > 1; }

// The micro-batch of an MTP policy with sequential unembedding: the trunk forward, then per head
// its block, the shared output's loss and the block's backward (kept gathered), then the trunk's
// backward (the last block pinned, the others re-gathered).
void sequential_ops(EngineRun& e, bool gather, bool regather) {
  std::vector<int> trunk, heads;
  int embed = -1, norm = -1, output = -1;
  for (int u = 0; u < int(e.units.size()); ++u) {
    switch (e.units[u].kind) {
      case UnitKind::Embedding: embed = u; break;
      case UnitKind::TrunkBlock: trunk.push_back(u); break;
      case UnitKind::HeadBlock: heads.push_back(u); break;
      case UnitKind::Norm: norm = u; break;
      case UnitKind::Output: output = u; break;
      case UnitKind::ValueHead: break;
    }
  }
  auto fwd = [&](int u, double flops) {
    e.ops.push_back({u, flops, gather, 0, int(e.lists[0].size()), true, false});
    e.lists[0].push_back(u);
  };
  fwd(embed, 0);
  for (int u : trunk) fwd(u, e.units[u].forward_flops);
  fwd(norm, 0);
  fwd(output, 0);
  const UnitWork& out = e.units[output];
  const double per_head = (out.forward_flops + out.backward_flops) / double(std::max<size_t>(1, heads.size()));
  for (int u : heads) {
    fwd(u, e.units[u].forward_flops);
    e.ops.push_back({output, per_head});
    e.ops.push_back({u, e.units[u].backward_flops + e.units[u].recompute_flops, false, -1, -1, false, true});
  }
  e.ops.push_back({output, 0, false, -1, -1, false, true});
  e.ops.push_back({norm, 0, false, -1, -1, false, true});
  for (int i = int(trunk.size()) - 1; i >= 0; --i) {
    const UnitWork& w = e.units[trunk[i]];
    const bool last = i == int(trunk.size()) - 1;  // pinned: never freed
    const bool g = regather && !last;
    e.ops.push_back(
        {trunk[i], w.backward_flops + w.recompute_flops, g, 1, g ? int(e.lists[1].size()) : -1, true, true});
    if (g) e.lists[1].push_back(trunk[i]);
  }
  e.ops.push_back({embed, 0, false, -1, -1, false, true});
}

// Any other model (all heads at once, a value model): forward in unit order, backward in reverse;
// the last unit stays gathered into its backward (kept), so does the pinned last trunk block, and the
// embedding's backward needs no weights.
void generic_ops(EngineRun& e, bool gather, bool regather, bool backward) {
  const int n = int(e.units.size());
  int pinned = -1;  // the trunk's last block (train/run_models.cpp pins it)
  for (int u = 0; u < n; ++u)
    if (e.units[u].kind == UnitKind::TrunkBlock) pinned = u;
  for (int u = 0; u < n; ++u) {
    e.ops.push_back({u, e.units[u].forward_flops, gather, 0, u, true, false});
    e.lists[0].push_back(u);
  }
  if (!backward) return;
  for (int u = n - 1; u >= 0; --u) {
    const UnitWork& w = e.units[u];
    const bool g = regather && u != n - 1 && u != pinned && w.kind != UnitKind::Embedding;
    e.ops.push_back({u, w.backward_flops + w.recompute_flops, g, 1, g ? int(e.lists[1].size()) : -1, true, true});
    if (g) e.lists[1].push_back(u);
  }
}

class StepSimulation {
 public:
  StepSimulation(const StepTimeInput& in, Costs& costs, double rate)
      : in_(in), costs_(costs), rate_(rate), t_(in.machine.compute.overlap) {}

  void run(std::vector<EngineRun>& frozen, EngineRun& trained) {
    trained_ = &trained;
    const bool no_shard = in_.sharding.strategy == ShardStrategy::NoShard;
    small_all_reduce("all-reduce (token counts)");
    for (int64_t m = 0; m < in_.accumulation; ++m) {
      for (EngineRun& f : frozen) micro_batch(f, /*reduce=*/false);
      micro_batch(trained, !in_.sharding.no_sync);
    }
    for (size_t u = 0; in_.sharding.no_sync && u < trained.units.size(); ++u) post_reduction(int(u));
    while (!reductions_.empty()) finish_oldest(no_shard);
    // Hybrid: unit by unit, the group shard's gradient summed across the replicas, blocking: one
    // all-reduce over two replicas, else a reduce-scatter and an all-gather back (so that every
    // replica gets the same bits; shard/sharded_model.cpp).
    const std::vector<Collective> replica_sum = costs_.replicas.ranks == 2
                                                    ? std::vector<Collective>{Collective::AllReduce}
                                                    : std::vector<Collective>{Collective::ReduceScatter,
                                                                              Collective::AllGather};
    for (size_t u = 0; costs_.replicas.ranks > 1 && u < trained.units.size(); ++u) {
      const int64_t bytes = trained.units[u].trainable_held * costs_.reduce_bytes;
      if (bytes == 0) continue;
      for (Collective c : replica_sum)
        t_.wait(kReplicaQueue, t_.post(kReplicaQueue, costs_.cost(std::string(collective_name(c)) + " (replicas)", c,
                                                                  bytes, costs_.replicas)));
    }
    small_all_reduce("all-reduce (grad norm)");
  }
  double now() const { return t_.now(); }
  double computed() const { return t_.computed(); }

 private:
  void small_all_reduce(const std::string& what) {
    const int id = t_.post(kEngineQueue, costs_.cost(what, Collective::AllReduce, kSmallAllReduceBytes, costs_.world));
    t_.wait(kEngineQueue, id);
  }

  // A unit's gather: one all-gather per flat buffer (trainable, frozen); returns the last one's id.
  int post_gather(const EngineRun& e, int unit) {
    const UnitWork& w = e.units[unit];
    int id = -1;
    for (int64_t numel : {w.trainable_padded, w.frozen_padded})
      if (numel > 0)
        id = t_.post(kEngineQueue, costs_.cost("all-gather (params)", Collective::AllGather, numel * costs_.param_bytes,
                                               costs_.group));
    return id;
  }

  void post_reduction(int unit) {
    const UnitWork& w = trained_->units[unit];
    if (w.trainable_padded == 0 || costs_.group.ranks <= 1) return;
    const int64_t bytes = w.trainable_padded * costs_.reduce_bytes;
    reductions_.push_back({unit, t_.post(kEngineQueue, costs_.cost("reduce-scatter (grads)", Collective::ReduceScatter,
                                                                   bytes, costs_.group))});
    const bool no_shard = in_.sharding.strategy == ShardStrategy::NoShard;
    if (!in_.sharding.async_reduce) finish_oldest(no_shard);
    while (reductions_.size() > kMaxPendingReduces) finish_oldest(no_shard);
  }

  // The engine completes the oldest reduction; under no_shard it all-gathers the summed shard back
  // into every replica at once (blocking).
  void finish_oldest(bool no_shard) {
    const auto [unit, id] = reductions_.front();
    reductions_.pop_front();
    t_.wait(kEngineQueue, id);
    if (!no_shard) return;
    const int64_t padded = trained_->units[unit].trainable_padded;
    const int ag = t_.post(kEngineQueue, costs_.cost("all-gather (no_shard grads)", Collective::AllGather,
                                                     padded * costs_.reduce_bytes, costs_.group));
    t_.wait(kEngineQueue, ag);
  }

  void prefetch_after(EngineRun& e, int list, int pos) {
    for (int j = std::max(e.next[list], pos + 1); j < int(e.lists[list].size()) && e.pending < e.depth; ++j) {
      e.posted[{list, j}] = post_gather(e, e.lists[list][j]);
      ++e.pending;
      e.next[list] = j + 1;
    }
  }

  void micro_batch(EngineRun& e, bool reduce) {
    e.pending = 0, e.next[0] = e.next[1] = 0;
    e.posted.clear();
    for (const Op& op : e.ops) {
      if (op.gather) {
        auto it = e.posted.find({op.list, op.pos});
        int id;
        if (it != e.posted.end()) {
          id = it->second;
          e.posted.erase(it);
          --e.pending;
        } else {
          id = post_gather(e, op.unit);
          e.next[op.list] = std::max(e.next[op.list], op.pos + 1);
        }
        t_.wait(kEngineQueue, id);
      }
      if (op.trigger && op.list >= 0 && e.depth > 0) prefetch_after(e, op.list, op.pos);
      if (op.flops > 0) t_.compute(op.flops / rate_);
      if (op.reduce && reduce) post_reduction(op.unit);
    }
  }

  const StepTimeInput& in_;
  Costs& costs_;
  double rate_;
  Timeline t_;
  std::deque<std::pair<int, int>> reductions_;  // (unit, collective id), oldest first
  const EngineRun* trained_ = nullptr;
};

EngineRun engine_run(const ModelSpec& spec, const StepTimeInput& in, int group, bool trains) {
  PassShape shape;
  shape.rows = in.micro_batch * (in.pairwise ? 2 : 1);
  shape.seq = in.seq;
  shape.fused_attention = in.fused_attention;
  shape.checkpointing = trains && in.checkpointing;
  EngineRun e;
  e.units = unit_work(spec, in.world_size, group, shape);
  const bool gather = gathers(in, group);
  const bool regather = gather && (!keeps_gathered(in.sharding.strategy) || shape.checkpointing);
  e.depth = gather ? in.sharding.effective_prefetch_depth() : 0;
  const bool has_output = std::any_of(e.units.begin(), e.units.end(),
                                      [](const UnitWork& w) { return w.kind == UnitKind::Output; });
  if (trains && in.sequential && has_output) sequential_ops(e, gather, regather);
  else
    generic_ops(e, gather, regather, trains);
  return e;
}

}  // namespace

StepTimePlan plan_step_time(const StepTimeInput& in) {
  const int world = in.world_size, group = in.shard_group > 0 ? in.shard_group : world;
  if (world < 1 || group < 1 || world % group != 0)
    throw_usage("time plan: a shard group of ", group, " rank(s) does not divide the world of ", world);
  if (group != world && !is_hybrid(in.sharding.strategy))
    throw_usage("time plan: shard groups of ", group, " rank(s) need a hybrid strategy, not ",
                choice_name(kShardStrategyNames, in.sharding.strategy));
  const int param_bytes = int(c10::elementSize(in.sharding.param_dtype));
  StepTimePlan p;
  p.matmul_flops_per_s = in.machine.matmul_flops(param_bytes);
  if (p.matmul_flops_per_s <= 0)
    throw_usage("machine profile '", in.machine.path, "' has no ", shard_dtype_name(in.sharding.param_dtype),
                " matmul rate ([compute] matmul_tflops_", shard_dtype_name(in.sharding.param_dtype),
                "), the compute dtype of this run ([sharding] param_dtype)");

  Costs costs;
  costs.in = &in;
  costs.param_bytes = param_bytes;
  costs.reduce_bytes = int64_t(c10::elementSize(in.sharding.reduce_dtype));
  const int rpn = std::max(1, std::min(in.ranks_per_node, world));
  costs.group = group_span(group, 1, rpn);
  costs.world = group_span(world, 1, rpn);
  costs.replicas = group_span(world / group, group, rpn);

  EngineRun trained = engine_run(in.trained, in, group, /*trains=*/true);
  std::vector<EngineRun> frozen;
  for (const ModelSpec& f : in.frozen) frozen.push_back(engine_run(f, in, group, /*trains=*/false));

  StepSimulation sim(in, costs, p.matmul_flops_per_s);
  sim.run(frozen, trained);

  p.compute_s = sim.computed();
  p.flops = p.compute_s * p.matmul_flops_per_s;
  int64_t elements = 0;
  for (const UnitWork& w : trained.units)
    elements += in.sharding.strategy == ShardStrategy::NoShard ? w.trainable_padded : w.trainable_held;
  const double per_element = kOptimizerBytes + (param_bytes == 2 ? kCastBytes : 0);
  p.optimizer_s = double(elements) * per_element / (in.machine.compute.memory_gbps * 1e9);
  p.step_s = sim.now() + p.optimizer_s;
  p.exposed_comm_s = std::max(0.0, sim.now() - p.compute_s);
  for (auto& [what, t] : costs.totals) {
    p.comm_s += t.seconds;
    p.collectives.push_back(t);
  }
  p.bytes_intra = costs.bus_intra, p.bytes_inter = costs.bus_inter;
  p.tokens_per_step = double(in.micro_batch) * (in.pairwise ? 2 : 1) * double(in.seq) * double(in.accumulation) * world;
  p.tokens_per_s = p.tokens_per_step / p.step_s;
  p.tokens_per_s_per_rank = p.tokens_per_s / world;
  if (in.sharding.offload != Offload::None) p.notes.push_back("offload's host copies and host AdamW are not modelled");
  return p;
}

std::string describe_step_time(const StepTimePlan& p, const StepTimeInput& in) {
  auto fmt = [](const char* f, auto... a) {
    char buf[256];
    snprintf(buf, sizeof(buf), f, a...);
    return std::string(buf);
  };
  auto bytes = [](double b) {
    char buf[32];
    if (b >= double(int64_t(1) << 30)) snprintf(buf, sizeof(buf), "%.2f GiB", b / double(int64_t(1) << 30));
    else if (b >= double(1 << 20))
      snprintf(buf, sizeof(buf), "%.1f MiB", b / double(1 << 20));
    else if (b >= 1024)
      snprintf(buf, sizeof(buf), "%.1f KiB", b / 1024.0);
    else
      snprintf(buf, sizeof(buf), "%.0f B", b);
    return std::string(buf);
  };
  const MachineProfile& m = in.machine;
  const int group = in.shard_group > 0 ? in.shard_group : in.world_size;
  std::string s = fmt("time plan for one step (machine profile %s, %s; %d rank(s) per node", m.machine.name.c_str(),
                      m.path.empty() ? "built in" : m.path.c_str(), std::min(in.ranks_per_node, in.world_size));
  if (group < in.world_size) s += fmt("; shard groups of %d, %d replicas", group, in.world_size / group);
  s += "):\n";
  s += fmt("  %-22s %10.4g s  (%.4g TFLOP per rank at %.4g TFLOP/s %s matmul)\n", "compute", p.compute_s,
           p.flops / 1e12, p.matmul_flops_per_s / 1e12, shard_dtype_name(in.sharding.param_dtype));
  s += fmt("  %-22s %10.4g s  (memory-bound at %.4g GB/s)\n", "optimizer", p.optimizer_s, m.compute.memory_gbps);
  s += fmt("  %-22s %10.4g s  (every collective alone on its link; overlap %.2f while computing)\n", "communication",
           p.comm_s, m.compute.overlap);
  for (const CollectiveTotal& c : p.collectives)
    s += fmt("    %-30s %4d x %10s  group %-5d %-12s %10.4g s\n", c.what.c_str(), int(c.count),
             bytes(double(c.bytes) / double(std::max<int64_t>(1, c.count))).c_str(), c.group, c.link.c_str(),
             c.seconds);
  s += fmt("    %-30s %.0f B across nodes, %.0f B inside a node (the busiest rank's; perf/comm_bytes_*_per_step)\n",
           "sent per step (ring)", p.bytes_inter, p.bytes_intra);
  s += fmt("  %-22s %10.4g s  (the step's time outside compute and the optimizer)\n", "exposed communication",
           p.exposed_comm_s);
  s += fmt("  %-22s %10.4g s  -> %.4g tokens/s (%.4g per rank; %.4g tokens per step)\n", "step", p.step_s,
           p.tokens_per_s, p.tokens_per_s_per_rank, p.tokens_per_step);
  for (const std::string& n : p.notes) s += "  note: " + n + "\n";
  return s;
}

}  // namespace wmtp
