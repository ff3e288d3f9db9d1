// The command-line checks of bin/generate and bin/evaluate, one place for both: every flag's value
// is checked before any file is read or any model loaded, and a wrong one is a usage error naming the
// flag and the range it must lie in (exit 2), never a failure after the work or a silent default.
// What needs the model (--speculative against n_future, --max-new-tokens against max_seq_len, the
// tokenizer against the checkpoint) is load_model.h's check_generation_model.
#pragma once

namespace wmtp {

struct GenerateOptions;
struct EvaluateOptions;

// The most --timeout may be, in seconds: a generated program running longer is a runaway.
constexpr double kMaxProgramTimeoutSec = 3600.0;

void check_generate_options(const GenerateOptions& opt);
void check_evaluate_options(const EvaluateOptions& opt);

}  // namespace wmtp
