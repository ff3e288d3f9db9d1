// ShardPlan: units -> flat trainable/frozen layouts padded to the world size, and per-rank ownership.
#include "shard/shard_plan.h"

#include <algorithm>
#include <unordered_set>

#include "core/error.h"

namespace wmtp {

namespace {

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

void finish_layout(FlatLayout& l, int world, int group) {
  l.padded_numel = round_up(l.numel, world);
  l.shard_numel = l.padded_numel / world;
  l.group_shard_numel = l.padded_numel / group;
}

void add_held(std::vector<OwnedRange>& out, const FlatLayout& l, int unit, bool trainable, int first, int count) {
  Interval mine{first * l.shard_numel, (first + count) * l.shard_numel};
  for (const ParamSlot& p : l.params) {
    Interval got = intersect(mine, Interval{p.offset, p.offset + p.numel});
    if (got.size() == 0) continue;
    out.push_back(OwnedRange{p.fqn, unit, trainable, got.begin - p.offset, got.begin - mine.begin, got.size()});
  }
}

}  // namespace

Interval intersect(Interval a, Interval b) { return Interval{std::max(a.begin, b.begin), std::min(a.end, b.end)}; }

ShardPlan::ShardPlan(const std::vector<ParamSpec>& specs, int world_size, int group_size)
    : world_size_(world_size), group_size_(group_size == 0 ? world_size : group_size), specs_(specs) {
  if (world_size < 1) throw_usage("shard plan: world size must be >= 1, got ", world_size);
  if (group_size_ < 1 || world_size % group_size_ != 0)
    throw_usage("shard plan: a group size of ", group_size_, " does not divide the world size ", world_size);
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& s = specs[i];
    if (!seen.insert(s.fqn).second) throw_usage("shard plan: parameter '", s.fqn, "' is listed twice");
    if (s.unit.empty()) throw_usage("shard plan: parameter '", s.fqn, "' has no unit");
    for (int64_t d : s.shape)
      if (d <= 0) throw_usage("shard plan: parameter '", s.fqn, "' has a non-positive dimension");
    int u = unit_index(s.unit);
    if (u < 0) {
      units_.push_back(UnitPlan{s.unit, {}, {}});
      u = static_cast<int>(units_.size()) - 1;
    }
    FlatLayout& l = s.trainable ? units_[u].trainable : units_[u].frozen;
    l.params.push_back(ParamSlot{s.fqn, s.shape, static_cast<int>(i), l.numel, s.numel()});
    l.numel += s.numel();
  }
  for (UnitPlan& u : units_) {
    finish_layout(u.trainable, world_size, group_size_);
    finish_layout(u.frozen, world_size, group_size_);
  }
}

int ShardPlan::unit_index(const std::string& name) const {
  for (size_t i = 0; i < units_.size(); ++i)
    if (units_[i].name == name) return static_cast<int>(i);
  return -1;
}

std::vector<OwnedRange> ShardPlan::owned_ranges(int rank) const {
  std::vector<OwnedRange> out;
  for (size_t u = 0; u < units_.size(); ++u) {
    add_held(out, units_[u].trainable, static_cast<int>(u), true, rank, 1);
    add_held(out, units_[u].frozen, static_cast<int>(u), false, rank, 1);
  }
  return out;
}

std::vector<OwnedRange> ShardPlan::owned_ranges(int rank, bool trainable) const {
  return slice_ranges(rank, 1, trainable);
}

std::vector<OwnedRange> ShardPlan::slice_ranges(int first, int count, bool trainable) const {
  std::vector<OwnedRange> out;
  for (size_t u = 0; u < units_.size(); ++u)
    add_held(out, trainable ? units_[u].trainable : units_[u].frozen, static_cast<int>(u), trainable, first, count);
  return out;
}

int64_t ShardPlan::trainable_numel() const {
  int64_t n = 0;
  for (const UnitPlan& u : units_) n += u.trainable.numel;
  return n;
}
int64_t ShardPlan::frozen_numel() const {
  int64_t n = 0;
  for (const UnitPlan& u : units_) n += u.frozen.numel;
  return n;
}
int64_t ShardPlan::trainable_padded_numel() const {
  int64_t n = 0;
  for (const UnitPlan& u : units_) n += u.trainable.padded_numel;
  return n;
}
int64_t ShardPlan::frozen_padded_numel() const {
  int64_t n = 0;
  for (const UnitPlan& u : units_) n += u.frozen.padded_numel;
  return n;
}
int64_t ShardPlan::max_unit_gathered_numel() const {
  int64_t n = 0;
  for (const UnitPlan& u : units_) n = std::max(n, u.trainable.padded_numel + u.frozen.padded_numel);
  return n;
}

}  // namespace wmtp
