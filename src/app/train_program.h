// The body every train-* program runs inside wmtp::Program: register the trainer's config sections
// and the pipeline's, load the file and --set overrides, then --print-config, --dry-run, or train.
// A train-* main is then: Program + with_config_options + stop_on_signals + run_train_program(ctx, pipeline).
#pragma once
#include "app/program.h"

namespace wmtp {

class Pipeline;

// Returns the exit code (0 done, 75 stopped by a signal). Throws like the trainer.
int run_train_program(ProgramContext& ctx, Pipeline& pipeline);

}  // namespace wmtp
