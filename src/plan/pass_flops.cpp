// FLOPs and flat-buffer sizes of each unit of a planned model, from its parameter specs.
#include "plan/pass_flops.h"

#include "plan/memory_plan.h"
#include "shard/shard_plan.h"

namespace wmtp {

namespace {

UnitKind kind_of(const std::string& unit, const ModelArgs& a) {
  if (unit == "tok_embeddings") return UnitKind::Embedding;
  if (unit == "norm") return UnitKind::Norm;
  if (unit == "output") return UnitKind::Output;
  if (unit == "value_head") return UnitKind::ValueHead;
  if (unit.rfind("layers.", 0) == 0 && std::stoll(unit.substr(7)) < a.n_trunk_blocks()) return UnitKind::TrunkBlock;
  return UnitKind::HeadBlock;  // the last of `layers` (head 0) and every extra head
}

}  // namespace

std::vector<UnitWork> unit_work(const ModelSpec& spec, int world_size, int group_size, const PassShape& shape) {
  const ModelArgs& a = spec.args;
  const ShardPlan plan(planned_param_specs(spec), world_size, group_size);
  const double T = double(shape.rows) * double(shape.seq);
  // Scores (q·kᵀ) and values (p·v): 2 FLOPs per multiply-add over seq keys for every query and head dim.
  const double attention = 2.0 * 2.0 * T * double(shape.seq) * double(a.n_heads * a.head_dim()) *
                           (shape.fused_attention ? 0.5 : 1.0);
  std::vector<UnitWork> out;
  for (const UnitPlan& u : plan.units()) {
    UnitWork w;
    w.name = u.name;
    w.kind = kind_of(u.name, a);
    w.trainable_padded = u.trainable.padded_numel;
    w.frozen_padded = u.frozen.padded_numel;
    w.trainable_held = u.trainable.group_shard_numel;
    const double passes = w.kind == UnitKind::Output ? double(a.n_future_tokens) : 1.0;
    for (const ParamSpec& p : plan.specs()) {
      if (p.unit != u.name || p.shape.size() != 2 || w.kind == UnitKind::Embedding) continue;
      const double f = 2.0 * T * double(p.numel()) * passes;
      w.forward_flops += f;
      w.backward_flops += p.trainable ? 2 * f : f;
    }
    if (w.kind == UnitKind::TrunkBlock || w.kind == UnitKind::HeadBlock) {
      w.forward_flops += attention;
      w.backward_flops += 2 * attention;
      if (shape.checkpointing) w.recompute_flops = w.forward_flops;
    }
    out.push_back(w);
  }
  return out;
}

}  // namespace wmtp
