// The flags generate and evaluate share, checked alike, and each program's own.
#include "eval/option_checks.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "eval/benchmarks.h"
#include "eval/evaluate.h"
#include "eval/generate.h"
#include "eval/load_model.h"
#include "track/mlflow_store.h"

namespace wmtp {

namespace {
// The decoding flags both programs have. `num_samples` is the count the run will use (evaluate's 0,
// the benchmark's default, already resolved).
void check_decoding_flags(int64_t max_new_tokens, int64_t num_samples, double temperature, double top_p,
                          int64_t speculative, int64_t batch_size, const std::string& dtype,
                          const std::string& device) {
  if (max_new_tokens < 1) throw_usage("--max-new-tokens ", max_new_tokens, ": expected at least 1");
  if (num_samples < 1) throw_usage("--num-samples ", num_samples, ": expected at least 1");
  if (!std::isfinite(temperature))
    throw_usage("--temperature ", temperature, ": expected a finite number (<= 0: greedy)");
  if (!(top_p > 0.0 && top_p <= 1.0)) throw_usage("--top-p ", top_p, ": expected a nucleus mass in (0, 1]");
  if (speculative < 1)
    throw_usage("--speculative ", speculative, ": expected 1 (plain decoding) or K in [2, n_future]");
  if (batch_size < 1) throw_usage("--batch-size ", batch_size, ": expected at least 1");
  generation_dtype(dtype);
  generation_device(device);
}
}  // namespace

void check_generate_options(const GenerateOptions& opt) {
  if (opt.prompts.empty() || opt.output.empty() || opt.checkpoint.empty() || opt.tokenizer.empty())
    throw_usage("generate needs --prompts, --output, --checkpoint and --tokenizer");
  check_decoding_flags(opt.max_new_tokens, opt.num_samples, opt.temperature, opt.top_p, opt.speculative, opt.batch_size,
                       opt.dtype, opt.device);
  for (const auto& s : opt.stop)
    if (s.empty())
      throw_usage("--stop '': an empty stop sequence matches nowhere (give the text a completion ends before)");
}

void check_evaluate_options(const EvaluateOptions& opt) {
  if (opt.benchmark.empty() || opt.data.empty() || opt.checkpoints.empty() || opt.tokenizer.empty() ||
      opt.output.empty())
    throw_usage("evaluate needs --benchmark, --data, --checkpoint, --tokenizer and --output");
  if (opt.benchmark != "humaneval" && opt.benchmark != "mbpp" && opt.benchmark != "codecontests" &&
      opt.benchmark != "gsm8k")
    throw_usage("--benchmark must be humaneval, mbpp, codecontests or gsm8k, got '", opt.benchmark, "'");
  if (opt.num_samples < 0)
    throw_usage("--num-samples ", opt.num_samples, ": expected at least 1 (0: the benchmark's default)");
  if (opt.max_tasks < 0) throw_usage("--max-tasks ", opt.max_tasks, ": expected a number of tasks (0: all)");
  check_decoding_flags(opt.max_new_tokens, opt.num_samples > 0 ? opt.num_samples : default_num_samples(opt.benchmark),
                       opt.temperature, opt.top_p, opt.speculative, opt.batch_size, opt.dtype, opt.device);
  const double t = opt.limits.timeout_s;
  if (!(t > 0.0 && t <= kMaxProgramTimeoutSec))
    throw_usage("--timeout ", t, ": expected seconds per program in (0, ", kMaxProgramTimeoutSec, "]");
  if (opt.python.empty()) throw_usage("--python must name an interpreter");
  if (!opt.tracking.mlflow_uri.empty()) {
    const MlflowUri u = parse_mlflow_uri(opt.tracking.mlflow_uri);
    if (u.kind == MlflowUri::Kind::Invalid)
      throw_usage("--mlflow-uri '", redact_uri(opt.tracking.mlflow_uri), "': ", u.problem);
    if (opt.tracking.mlflow_experiment.empty()) throw_usage("--mlflow-experiment must not be empty with --mlflow-uri");
  }
}

}  // namespace wmtp
