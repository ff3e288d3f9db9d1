// Sampler: which samples a run trains on, and in which order — a pure function of the seed, the
// dataset metadata and the [data] config, never of the world size (docs/data.md,
// "Sampling").
//
//   selection  once, with CPython's random seeded by `seed` (same permutations as weighted_mtp):
//              "difficulty" unique (correct, incorrect) pairs per difficulty bin with bin weights and
//              a per-problem cap, or "length_balanced" pairs matched by solution-length bin (labels
//              visited in sorted order — weighted_mtp's set order was hash-seed dependent).
//              Pointwise items keep the correct sample of each pair; pairwise items keep both.
//   epochs     one shuffle of the selection per epoch, from (seed, epoch).
//   steps      global step s of an epoch consumes the contiguous block [s*G, (s+1)*G) of the epoch's
//              order (G = global_batch_size); the tail that does not fill a step is dropped, so every
//              rank gets the same number of batches. Rank r takes block[r::world], split into
//              accumulation_steps() micro-batches of micro_batch_size. Over an epoch that is exactly
//              items[rank::world] of the trimmed list, and a run resumed on a different number of
//              ranks trains on the same global batches.
//   cursor     (epoch, position = items of the epoch consumed): saved in checkpoints, restored exactly.
#pragma once
#include <cstdint>
#include <vector>

#include "data/data_config.h"
#include "data/dataset_metadata.h"

namespace wmtp {

// One training item: a correct sample (pos) and, for pairwise items, an incorrect one of the same
// problem (neg; -1 when pointwise). Indices are dataset rows.
struct DataItem {
  int64_t pos = -1;
  int64_t neg = -1;
  int32_t problem = -1;
  bool operator==(const DataItem& o) const { return pos == o.pos && neg == o.neg && problem == o.problem; }
  bool operator!=(const DataItem& o) const { return !(*this == o); }
};

enum class Split { Train, Valid };

struct BatchGeometry {
  int64_t global_batch_size = 0;  // sequences (or pairs) per optimizer step, all ranks together
  int64_t micro_batch_size = 0;   // per rank per forward/backward
  int world_size = 1;
  int rank = 0;
  // global / (micro * world); throws Error(Usage) unless whole and positive.
  int64_t accumulation_steps() const;
};

struct DataCursor {
  int64_t epoch = 0;     // current epoch (0-based)
  int64_t position = 0;  // items of this epoch's order already consumed
  bool operator==(const DataCursor& o) const { return epoch == o.epoch && position == o.position; }
};

// The items of one global step, and this rank's share.
struct GlobalBatchItems {
  DataCursor start;                                  // cursor before the step
  std::vector<DataItem> global;                      // G items, identical on every rank
  std::vector<std::vector<DataItem>> micro_batches;  // this rank's, accumulation_steps() of micro_batch_size
};

class Sampler {
 public:
  // Draws cfg.n_samples (Train) or cfg.val_n_samples (Valid) items; 0 = every available pair.
  // Throws Error(Usage) when the data cannot supply the items asked for.
  Sampler(const DatasetMetadata& meta, const DataConfig& cfg, Split split);

  const std::vector<DataItem>& items() const { return items_; }  // selection order
  int64_t size() const { return static_cast<int64_t>(items_.size()); }
  bool pairwise() const { return pairwise_; }
  int64_t seed() const { return seed_; }
  // Hash of the seed and the selected items: a saved cursor is only meaningful for the same value.
  uint64_t fingerprint() const;

  // The epoch's order: items() shuffled with CPython's random seeded by (seed, epoch).
  std::vector<DataItem> epoch_order(int64_t epoch) const;
  // floor(size / G); throws Error(Usage) when G exceeds the items.
  int64_t steps_per_epoch(int64_t global_batch_size) const;
  // Run-wide step number -> the cursor at its start (for a constant G).
  DataCursor cursor_of_step(int64_t step, int64_t global_batch_size) const;
  // Random access to a run-wide step (reshuffles its epoch: use GlobalBatchIterator in loops).
  std::vector<DataItem> global_step_items(int64_t step, int64_t global_batch_size) const;

 private:
  std::vector<DataItem> items_;
  bool pairwise_ = false;
  int64_t seed_ = 0;
};

// This rank's micro-batches of one step's global items: global[rank::world] cut into chunks of
// micro_batch_size (throws Error(Usage) when the geometry does not divide global.size()).
std::vector<std::vector<DataItem>> rank_micro_batches(const std::vector<DataItem>& global, const BatchGeometry& g);

// Evaluation: items[rank::world] in chunks of micro_batch_size, padded with empty batches so every
// rank runs the same number (ceil(n / (world*micro))). Nothing is dropped.
std::vector<std::vector<DataItem>> eval_micro_batches(const std::vector<DataItem>& items, int world_size, int rank,
                                                      int64_t micro_batch_size);

// Walks the steps of a run from a cursor, shuffling once per epoch.
class GlobalBatchIterator {
 public:
  GlobalBatchIterator(const Sampler& sampler, const BatchGeometry& geometry, DataCursor start = {});
  GlobalBatchItems next();
  // Where the next step starts: save this; GlobalBatchIterator(sampler, geometry, saved) continues exactly.
  DataCursor cursor() const { return cursor_; }

 private:
  void normalize();  // move to the next epoch when fewer than G items remain
  const Sampler& sampler_;
  BatchGeometry geometry_;
  DataCursor cursor_;
  int64_t order_epoch_ = -1;
  std::vector<DataItem> order_;
};

}  // namespace wmtp
