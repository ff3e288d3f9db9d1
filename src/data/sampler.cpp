// Sampler: selection from the config, per-epoch order, step blocks and rank shares.
#include "data/sampler.h"

#include "core/error.h"
#include "core/hash.h"
#include "data/pair_selection.h"
#include "data/py_random.h"

namespace wmtp {

int64_t BatchGeometry::accumulation_steps() const {
  if (global_batch_size < 1 || micro_batch_size < 1 || world_size < 1 || rank < 0 || rank >= world_size)
    throw_usage("batch geometry: global_batch_size (", global_batch_size, "), micro_batch_size (", micro_batch_size,
                ") and world size (", world_size, ") must be positive");
  const int64_t per_pass = micro_batch_size * world_size;
  if (global_batch_size % per_pass != 0)
    throw_usage("global_batch_size ", global_batch_size, " is not a multiple of micro_batch_size ", micro_batch_size,
                " x ", world_size, " ranks = ", per_pass, " (gradient accumulation must be whole)");
  return global_batch_size / per_pass;
}

Sampler::Sampler(const DatasetMetadata& meta, const DataConfig& cfg, Split split)
    : pairwise_(cfg.pairwise), seed_(cfg.seed) {
  cfg.validate();
  std::vector<DifficultyBin> bins;
  for (size_t b = 0; b < cfg.difficulty_bins.size(); b += 2)
    bins.push_back({cfg.difficulty_bins[b], cfg.difficulty_bins[b + 1],
                    cfg.difficulty_weights.empty() ? 1.0 : cfg.difficulty_weights[b / 2]});
  const int64_t n = split == Split::Train ? cfg.n_samples : cfg.val_n_samples;
  PyRandom rng(static_cast<uint64_t>(cfg.seed));
  std::vector<SelectedPair> pairs;
  try {
    pairs = cfg.sampling == Sampling::LengthBalanced
                ? select_length_balanced_pairs(meta.problems, bins, cfg.length_bins, n, cfg.max_pairs_per_problem, rng)
                : select_difficulty_pairs(meta.problems, bins, n, cfg.max_pairs_per_problem, rng);
  } catch (const Error& e) {
    // Name the file at fault and the key that asked for its pairs.
    const bool train = split == Split::Train;
    throw Error(e.kind(),
                detail::concat("[data] ", train ? "train" : "valid", " = '", train ? cfg.train : cfg.valid, "' (",
                               train ? "n_samples" : "val_n_samples", " = ", n, n == 0 ? ": every pair" : "",
                               "): ", e.what()),
                e.reach());
  }
  items_.reserve(pairs.size());
  for (const auto& p : pairs) items_.push_back({p.correct, pairwise_ ? p.incorrect : -1, p.problem});
}

uint64_t Sampler::fingerprint() const {
  Fnv1a64 h;
  h.add_u64(static_cast<uint64_t>(seed_)).add_u64(pairwise_);
  for (const auto& it : items_) h.add_u64(static_cast<uint64_t>(it.pos)).add_u64(static_cast<uint64_t>(it.neg));
  return h.value();
}

std::vector<DataItem> Sampler::epoch_order(int64_t epoch) const {
  // A stream of its own per epoch (key: seed, epoch, tag), unrelated to the selection stream.
  const uint64_t s = static_cast<uint64_t>(seed_), e = static_cast<uint64_t>(epoch);
  PyRandom rng(std::vector<uint32_t>{static_cast<uint32_t>(s), static_cast<uint32_t>(s >> 32), static_cast<uint32_t>(e),
                                     static_cast<uint32_t>(e >> 32), 0x45504f43U});
  std::vector<DataItem> order(items_);
  rng.shuffle(order);
  return order;
}

int64_t Sampler::steps_per_epoch(int64_t global_batch_size) const {
  if (global_batch_size < 1) throw_usage("global_batch_size must be >= 1, got ", global_batch_size);
  const int64_t steps = size() / global_batch_size;
  if (steps == 0)
    throw_usage("global_batch_size ", global_batch_size, " exceeds the ", size(),
                " items sampled: not one optimizer step per epoch");
  return steps;
}

DataCursor Sampler::cursor_of_step(int64_t step, int64_t global_batch_size) const {
  const int64_t spe = steps_per_epoch(global_batch_size);
  return {step / spe, (step % spe) * global_batch_size};
}

std::vector<DataItem> Sampler::global_step_items(int64_t step, int64_t global_batch_size) const {
  const DataCursor c = cursor_of_step(step, global_batch_size);
  std::vector<DataItem> order = epoch_order(c.epoch);
  return {order.begin() + c.position, order.begin() + c.position + global_batch_size};
}

std::vector<std::vector<DataItem>> rank_micro_batches(const std::vector<DataItem>& global, const BatchGeometry& g) {
  const int64_t accum = g.accumulation_steps();
  if (static_cast<int64_t>(global.size()) != g.global_batch_size)
    throw_usage("a step holds ", global.size(), " items, not global_batch_size ", g.global_batch_size);
  std::vector<std::vector<DataItem>> out(static_cast<size_t>(accum));
  int64_t k = 0;
  for (size_t i = static_cast<size_t>(g.rank); i < global.size(); i += static_cast<size_t>(g.world_size), ++k)
    out[static_cast<size_t>(k / g.micro_batch_size)].push_back(global[i]);
  return out;
}

std::vector<std::vector<DataItem>> eval_micro_batches(const std::vector<DataItem>& items, int world_size, int rank,
                                                      int64_t micro_batch_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size || micro_batch_size < 1)
    throw_usage("eval batches: bad world size ", world_size, ", rank ", rank, " or micro_batch_size ",
                micro_batch_size);
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t per_pass = micro_batch_size * world_size;
  const int64_t n_batches = (n + per_pass - 1) / per_pass;
  std::vector<std::vector<DataItem>> out(static_cast<size_t>(n_batches));
  int64_t k = 0;
  for (int64_t i = rank; i < n; i += world_size, ++k)
    out[static_cast<size_t>(k / micro_batch_size)].push_back(items[i]);
  return out;
}

GlobalBatchIterator::GlobalBatchIterator(const Sampler& sampler, const BatchGeometry& geometry, DataCursor start)
    : sampler_(sampler), geometry_(geometry), cursor_(start) {
  geometry_.accumulation_steps();  // validates
  sampler_.steps_per_epoch(geometry_.global_batch_size);
  if (cursor_.epoch < 0 || cursor_.position < 0 || cursor_.position > sampler_.size())
    throw_input("data cursor (epoch ", cursor_.epoch, ", position ", cursor_.position, ") is outside the ",
                sampler_.size(), " sampled items (was the checkpoint made with other data or sampling keys?)");
  normalize();
}

void GlobalBatchIterator::normalize() {
  if (cursor_.position + geometry_.global_batch_size > sampler_.size()) {
    ++cursor_.epoch;
    cursor_.position = 0;
  }
}

GlobalBatchItems GlobalBatchIterator::next() {
  normalize();
  if (order_epoch_ != cursor_.epoch) {
    order_ = sampler_.epoch_order(cursor_.epoch);
    order_epoch_ = cursor_.epoch;
  }
  GlobalBatchItems s;
  s.start = cursor_;
  s.global.assign(order_.begin() + cursor_.position, order_.begin() + cursor_.position + geometry_.global_batch_size);
  s.micro_batches = rank_micro_batches(s.global, geometry_);
  cursor_.position += geometry_.global_batch_size;
  normalize();
  return s;
}

}  // namespace wmtp
