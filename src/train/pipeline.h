// Pipeline: what a train-* program plugs into the one Trainer (DESIGN §12). The baseline needs none
// of the hooks; verifiable, rho1 and critic override the ones they need.
//   - config:  its own TOML section(s)
//   - weights: per-token or per-head loss weights for a micro-batch (undefined = uniform)
//   - state:   what must survive a resume (e.g. the TD EMA), saved in /train of every checkpoint
//   - metrics: extra keys for the progress record
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <utility>

namespace wmtp {

class ConfigSet;
class TrainState;
class MetricsRecord;
struct Batch;

class Pipeline {
 public:
  virtual ~Pipeline() = default;
  virtual std::string name() const = 0;                 // "baseline"
  virtual bool implemented() const { return true; }
  virtual void add_config(ConfigSet&) {}                // register pipeline sections
  virtual bool lora_by_default() const { return false; }
  // Loss weights for one micro-batch: undefined, [B, S] (target positions) or [B, S, K].
  virtual at::Tensor token_weights(const Batch&) { return {}; }
  virtual void end_step(int64_t /*step*/) {}            // once per optimizer step, on every rank
  virtual void save_state(TrainState&) const {}
  virtual void load_state(const TrainState&) {}
  virtual void add_metrics(MetricsRecord&) const {}
};

// A pipeline whose loss is not built yet: its program parses configs and plans (--dry-run), then
// exits 2 saying so. Replaced by the real pipeline in a later issue.
class PendingPipeline final : public Pipeline {
 public:
  explicit PendingPipeline(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  bool implemented() const override { return false; }

 private:
  std::string name_;
};

// Uniform token weights: train-baseline.
class BaselinePipeline final : public Pipeline {
 public:
  std::string name() const override { return "baseline"; }
};

}  // namespace wmtp
