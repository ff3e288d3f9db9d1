// ShardedAdamW: element-wise AdamW over the engine's fp32 shards, grouped by FQN pattern.
#include "shard/sharded_adamw.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <unordered_map>

#include "core/error.h"
#include "core/phase_timer.h"
#include "comm/communicator.h"
#include "comm/device.h"
#include "shard/adamw_math.h"
#include "shard/sharded_model.h"


namespace wmtp {

bool match_fqn_pattern(const std::string& pattern, const std::string& fqn) {
  // Iterative glob with one backtrack point (the last '*').
  size_t p = 0, s = 0, star = std::string::npos, mark = 0;
  while (s < fqn.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == fqn[s])) {
      ++p;
      ++s;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = s;
    } else if (star != std::string::npos) {
      p = star + 1;
      s = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

ShardedAdamW::ShardedAdamW(ShardedModel& model, const OptimizerConfig& cfg) : model_(model), cfg_(cfg) {
  cfg.validate();
  beta1_ = cfg.betas[0];
  beta2_ = cfg.betas[1];
  groups_.push_back(ParamGroup{"default", cfg.lr, cfg.lr, cfg.weight_decay, 0});
  for (size_t i = 0; i < cfg.group_patterns.size(); ++i)
    groups_.push_back(
        ParamGroup{cfg.group_patterns[i], cfg.group_lr[i], cfg.group_lr[i], cfg.group_weight_decay[i], 0});
  for (const ParamSpec& s : model.plan().specs())
    if (s.trainable) groups_[static_cast<size_t>(group_of(s.fqn))].numel += s.numel();

  for (const TrainableShard& sh : model.trainable_shards()) {
    UnitState st;
    // Beside the masters: on the device, or (offload) in pinned host memory.
    auto zeros = [&] {
      return model.offload() == Offload::None
                 ? at::zeros_like(sh.master)
                 : pinned_host_empty(sh.master.numel(), at::kFloat, model.device()).zero_();
    };
    st.exp_avg = zeros();
    st.exp_avg_sq = zeros();
    for (const LocalSegment& seg : sh.segments) {
      int g = group_of(seg.fqn);
      if (!st.runs.empty() && st.runs.back().group == g &&
          st.runs.back().begin + st.runs.back().numel == seg.local_offset)
        st.runs.back().numel += seg.numel;
      else
        st.runs.push_back(Run{seg.local_offset, seg.numel, g});
    }
    state_.push_back(std::move(st));
  }
}

int ShardedAdamW::group_of(const std::string& fqn) const {
  for (size_t i = 0; i < cfg_.group_patterns.size(); ++i)
    if (match_fqn_pattern(cfg_.group_patterns[i], fqn)) return static_cast<int>(i) + 1;
  return 0;
}

at::Tensor ShardedAdamW::local_grad_norm_sq() {
  model_.reduce_gradients();
  c10::NoGradGuard no_grad;
  // Each shard's norm on its device, in double.
  std::vector<at::Tensor> norms;
  for (const TrainableShard& sh : model_.trainable_shards())
    norms.push_back(
        at::linalg_vector_norm(sh.grad.narrow(0, sh.owned_begin, sh.owned_numel), 2, c10::nullopt, false, at::kDouble));
  return norms.empty() ? at::zeros({1}, at::kDouble) : at::stack(norms).pow(2).sum().reshape({1});
}

double ShardedAdamW::clip_grad_norm(double max_norm, at::Tensor* also_sum) {
  // One copy to the host, one all-reduce — which also carries the caller's figures, so a step needs
  // no separate collective for them.
  const at::Tensor local = read_to_host(model_.phase_timer(), local_grad_norm_sq());
  const bool extra = also_sum != nullptr && also_sum->defined();
  at::Tensor buf = extra ? at::cat({local, also_sum->reshape({-1}).to(at::kCPU, at::kDouble)}) : local;
  model_.comm().all_reduce(buf, ReduceOp::Sum);
  if (extra) also_sum->copy_(buf.narrow(0, 1, also_sum->numel()).view_as(*also_sum));
  return clip_to_global_norm(std::sqrt(buf[0].item<double>()), max_norm);
}

double ShardedAdamW::clip_to_local_norm_sq(double local_sq, double max_norm) {
  at::Tensor buf = at::full({1}, local_sq, at::kDouble);
  model_.comm().all_reduce(buf, ReduceOp::Sum);
  return clip_to_global_norm(std::sqrt(buf[0].item<double>()), max_norm);
}

double ShardedAdamW::clip_to_global_norm(double total, double max_norm) {
  c10::NoGradGuard no_grad;
  last_norm_ = total;
  if (!std::isfinite(total)) return total;  // scaling would turn an Inf into NaN; step() refuses
  if (max_norm > 0) {
    const double coef = max_norm / (total + 1e-6);
    if (coef < 1.0)
      for (TrainableShard& sh : model_.trainable_shards()) sh.grad.mul_(coef);
  }
  return total;
}

void ShardedAdamW::step() {
  if (!std::isfinite(last_norm_))
    throw Error(ErrorKind::Runtime,
                detail::concat("the gradient norm is ", last_norm_,
                               ": the optimizer step is refused, parameters and "
                               "optimizer state are unchanged"),
                Reach::Agreed);
  model_.reduce_gradients();
  c10::NoGradGuard no_grad;
  ++step_;
  model_.invalidate_gathered();  // gathered copies of the old masters are stale from here on
  // One fused update (adamw_math.h) per shard and parameter group over the group's runs:
  // torch.optim.AdamW's arithmetic with each element read and written once. Shard by shard, since
  // under offload the gradient comes down to the host through staging that the next shard reuses.
  auto& shards = model_.trainable_shards();
  for (size_t i = 0; i < shards.size(); ++i) {
    // Where the masters live: the device, or (offload) the host, with the gradient brought down.
    const at::Tensor grad_all = model_.optimizer_grad(i);
    std::vector<AdamWRanges> by_group(groups_.size());
    for (const Run& r : state_[i].runs)
      by_group[static_cast<size_t>(r.group)].add(shards[i].master.narrow(0, r.begin, r.numel),
                                                 grad_all.narrow(0, r.begin, r.numel),
                                                 state_[i].exp_avg.narrow(0, r.begin, r.numel),
                                                 state_[i].exp_avg_sq.narrow(0, r.begin, r.numel));
    for (size_t g = 0; g < groups_.size(); ++g)
      if (!by_group[g].empty())
        adamw_update(by_group[g], AdamWHyper{groups_[g].lr, beta1_, beta2_, cfg_.eps, groups_[g].weight_decay, step_});
    model_.masters_changed(i);
  }
}

void ShardedAdamW::zero_grad() {
  last_norm_ = 0.0;
  model_.zero_grad();
}

bool ShardedAdamW::state_is_finite() const {
  c10::NoGradGuard no_grad;
  const auto& shards = model_.trainable_shards();
  for (size_t i = 0; i < shards.size(); ++i) {
    const TrainableShard& sh = shards[i];
    for (const at::Tensor& t : {sh.master, state_[i].exp_avg, state_[i].exp_avg_sq})
      if (!t.narrow(0, sh.owned_begin, sh.owned_numel).isfinite().all().item<bool>()) return false;
  }
  return true;
}

void ShardedAdamW::set_lr_scale(double scale) {
  for (ParamGroup& g : groups_) g.lr = g.peak_lr * scale;
}

void ShardedAdamW::set_group_lr(int group, double lr) {
  if (group < 0 || group >= static_cast<int>(groups_.size()))
    throw_runtime("ShardedAdamW: no parameter group ", group, " (have ", groups_.size(), ")");
  groups_[static_cast<size_t>(group)].lr = lr;
}

// ---- checkpoint state

std::vector<TensorPiece> ShardedAdamW::state_pieces(AdamState which) {
  std::vector<TensorPiece> out;
  const auto& shards = model_.trainable_shards();
  std::unordered_map<int, size_t> by_unit;
  for (size_t i = 0; i < shards.size(); ++i) by_unit[shards[i].unit] = i;
  for (const OwnedRange& r : model_.plan().owned_ranges(model_.owned_slice(), true)) {
    size_t i = by_unit.at(r.unit);
    const at::Tensor& t = which == AdamState::ExpAvg ? state_[i].exp_avg : state_[i].exp_avg_sq;
    out.push_back(TensorPiece{r.fqn, r.param_offset, t.narrow(0, shards[i].owned_begin + r.shard_offset, r.numel)});
  }
  return out;
}

void ShardedAdamW::load_state_pieces(AdamState which, const std::vector<TensorPiece>& pieces) {
  c10::NoGradGuard no_grad;
  std::unordered_map<std::string, std::vector<TensorPiece>> mine;
  for (TensorPiece& p : state_pieces(which)) mine[p.name].push_back(p);
  std::unordered_map<std::string, int64_t> numel;
  for (const ParamSpec& s : model_.plan().specs())
    if (s.trainable) numel[s.fqn] = s.numel();
  for (const TensorPiece& p : pieces) {
    auto n = numel.find(p.name);
    if (n == numel.end()) throw_input("ShardedAdamW: state piece of unknown or frozen parameter '", p.name, "'");
    at::Tensor data = p.data.reshape({-1});
    if (p.offset < 0 || p.offset + data.numel() > n->second)
      throw_input("ShardedAdamW: state piece of '", p.name, "' lies outside the parameter");
    for (TensorPiece& dst : mine[p.name]) {
      Interval got = intersect(Interval{dst.offset, dst.offset + dst.data.numel()},
                               Interval{p.offset, p.offset + data.numel()});
      if (got.size() == 0) continue;
      dst.data.narrow(0, got.begin - dst.offset, got.size()).copy_(data.narrow(0, got.begin - p.offset, got.size()));
    }
  }
  sync_state_replicas();
}

void ShardedAdamW::sync_state_replicas() {
  Communicator* replicas = model_.replica_comm();
  if (!replicas) return;
  for (size_t i = 0; i < state_.size(); ++i) {
    const TrainableShard& sh = model_.trainable_shards()[i];
    for (at::Tensor* t : {&state_[i].exp_avg, &state_[i].exp_avg_sq}) {
      at::Tensor mine = t->narrow(0, sh.owned_begin, sh.owned_numel).clone();
      replicas->all_gather(mine, *t);
    }
  }
}

int64_t ShardedAdamW::state_bytes() const {
  int64_t b = 0;
  for (const UnitState& s : state_) b += (s.exp_avg.numel() + s.exp_avg_sq.numel()) * 4;
  return b;
}

MemoryStats ShardedAdamW::memory_stats() const {
  MemoryStats m = model_.memory_stats();
  m.optimizer_bytes = state_bytes();
  return m;
}

}  // namespace wmtp
