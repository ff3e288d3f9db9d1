// Named step statistics: what a pipeline sums (or maximizes) over the micro-batches of a step and
// over every rank, by name instead of by position. A pipeline declares its statistics once
// (StatLayout: name -> a run of slots, per-head arrays included); the trainer still reduces all
// sums in one all-reduce and all maxima in another, over the flat vectors the layout lays out.
//
//   StatLayout train;  train.sum("loss").sum("weighted_sum", K).max("w_max");   // once, in attach()
//   NamedStats st = train.make();  st.set("weighted_sum", k, x);                   // per micro-batch
//   double y = global.get("weighted_sum", k);                                     // after the reduction
//
// Adding a statistic is one more declaration: nothing else moves. A run may also be set from a
// tensor still on the device (`st.set("weighted_sum", sums)`): nothing waits for it until the step
// reads every such value at once (read_pending), so a step costs one host read however many
// micro-batches and statistics it has.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

namespace wmtp {

struct NamedStats;
class PhaseTimer;

class StatLayout {
 public:
  enum class Reduce { Sum, Max };
  struct Slot {
    Reduce reduce = Reduce::Sum;
    size_t offset = 0, size = 1;  // into NamedStats::sum or NamedStats::max
  };
  // Declare `name` as `size` slots summed (sum) or maximized (max, starting at the lowest double;
  // put -x in for a minimum). Names are unique across both kinds (Error(Runtime) otherwise).
  StatLayout& sum(const std::string& name, size_t size = 1);
  StatLayout& max(const std::string& name, size_t size = 1);

  const Slot& slot(const std::string& name) const;  // Error(Runtime) naming the statistic if undeclared
  size_t sum_size() const { return sum_size_; }
  size_t max_size() const { return max_size_; }
  // Statistics of one micro-batch in this layout: sums 0, maxima the lowest double.
  NamedStats make() const;

 private:
  StatLayout& declare(const std::string& name, Reduce reduce, size_t size);
  std::unordered_map<std::string, Slot> slots_;
  size_t sum_size_ = 0, max_size_ = 0;
};

// Statistics of one micro-batch (or of a whole step once reduced). `sum` and `max` are the flat
// storage the trainer reduces, in the layout's order; read and write them by name. tokens
// (attention-mask tokens processed) and flops (model FLOPs spent) feed throughput and MFU.
struct NamedStats {
  const StatLayout* layout = nullptr;  // the pipeline's, which outlives every NamedStats it makes
  std::vector<double> sum, max;
  double tokens = 0, flops = 0;

  void set(const std::string& name, double x) { at(name, 0) = x; }
  void set(const std::string& name, size_t i, double x) { at(name, i) = x; }
  void set(const std::string& name, const std::vector<double>& xs);  // the whole run of slots
  // The whole run from `values` (as many elements as slots, any dtype and device), read later by
  // read_pending. A run is set once per micro-batch, from doubles or from a tensor, not both.
  void set(const std::string& name, const at::Tensor& values);
  // Error(Runtime) for a run set from a tensor and not read yet.
  double get(const std::string& name, size_t i = 0) const;
  std::vector<double> get_all(const std::string& name) const;

  // Element-wise sum / max of another micro-batch's statistics in the same layout (an empty side,
  // e.g. a default-constructed accumulator, takes the other's layout).
  void accumulate(const NamedStats& o);

  bool has_pending() const { return !pending_.empty(); }
  // Reads every value set from a tensor, and `also` (e.g. the gradient norm; may be undefined),
  // in one host read (core/phase_timer.h read_to_host, counted on `timer`), and folds them into
  // sum and max. Returns `also` on the host as double (undefined when `also` is).
  at::Tensor read_pending(PhaseTimer* timer, const at::Tensor& also = {});

 private:
  double& at(const std::string& name, size_t i);
  void check_read(const std::string& name) const;  // Error(Runtime) while `name` has a value on the device
  const double* run(const std::string& name, size_t* size) const;
  struct Pending {
    StatLayout::Slot slot;
    at::Tensor values;  // flat, slot.size elements
  };
  std::vector<Pending> pending_;  // in the order they were set and accumulated
};

}  // namespace wmtp
