// evaluate: pass@k of one or more checkpoints on a benchmark (benchmarks.h), by weighted_mtp's rules (docs/parity.md).
// Tasks are split across ranks (task i on rank i mod world); each rank generates its tasks'
// samples (generate.h: one random stream per task and sample, so the figures do not depend on the
// rank count) and scores them in the sandbox; rank 0 writes, per checkpoint, OUTPUT/<name>/tasks.csv
// (task, n, correct, pass@k..., partial), samples.jsonl (the first 10 tasks' completions and
// verdicts) and summary.json (pass@k, tokens per forward, draft acceptance per head, the tasks whose
// samples the model's context cut, the slowest rank's seconds in generation), and OUTPUT/summary.json
// over all checkpoints; the numbers also go to
// TensorBoard / MLflow as "eval/<benchmark>/pass_at_<k>" ... (step 0).
// Every input is checked before the first forward: the flags (option_checks.h), the benchmark file,
// every checkpoint against the tokenizer and flags (check_generation_model), the output directories.
// Results an earlier evaluation left in OUTPUT are removed then, and OUTPUT/summary.json is written
// last: it exists only for a run that finished.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/log.h"
#include "eval/sandbox.h"
#include "track/tracking_config.h"

namespace wmtp {

struct EvaluateOptions {
  std::string benchmark, data, tokenizer, output, lora;
  std::vector<std::string> checkpoints;
  int64_t max_tasks = 0;    // 0: every task of the (capped) set
  int64_t num_samples = 0;  // 0: the benchmark's default (100; codecontests 10)
  int64_t max_new_tokens = 512;
  int64_t speculative = 1;
  int64_t batch_size = 8;  // a task's samples decoded together, plain or speculative (Generator::complete_all)
  double temperature = 0.2, top_p = 0.95;
  uint64_t seed = 42;
  std::string dtype = "fp32", device = "cpu", python = "python3";
  SandboxLimits limits;
  bool allow_unisolated = false;
  // Each checkpoint's summary also goes where training metrics go: TensorBoard events in
  // OUTPUT/<name>/tensorboard, MLflow (a run named <name>) when mlflow_uri is set.
  TrackingConfig tracking;
};

// Returns the summary of every checkpoint (what OUTPUT/summary.json holds). Collective.
json::Value run_evaluate(EvaluateOptions opt, MPI_Comm comm, const Logger& log);

}  // namespace wmtp
