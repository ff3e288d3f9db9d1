// evaluate: pass@k of checkpoints on HumanEval, MBPP, CodeContests or GSM8K files, generated code run
// in the sandbox. Thin main over eval/evaluate.h.
#include "app/program.h"
#include "eval/evaluate.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  wmtp::Program prog(
      argc, argv,
      {"evaluate",
       "pass@k of one or more checkpoints on a benchmark file (humaneval, mbpp, codecontests, gsm8k) "
       "by weighted_mtp's prompts and scoring rules (docs/parity.md); generated programs run in a sandbox (process "
       "group, rlimits, network/PID/mount namespaces). Per-task CSV, samples and summary JSON per "
       "checkpoint.",
       "mpirun -np 4 bin/evaluate --benchmark humaneval --data HumanEval.jsonl --checkpoint a.h5 "
       "--checkpoint b.h5 --tokenizer tokenizer.model --output eval/ --num-samples 20"});
  wmtp::EvaluateOptions opt;
  // One option per line:
  // clang-format off
  prog.options().add_options()
    ("benchmark", po::value<std::string>(&opt.benchmark), "humaneval | mbpp | codecontests | gsm8k")
    ("data", po::value<std::string>(&opt.data), "the benchmark's JSONL file (yours: see docs/evaluate.md)")
    ("checkpoint", po::value<std::vector<std::string>>(&opt.checkpoints), "model file or checkpoint (repeatable: compared in one run)")
    ("lora", po::value<std::string>(&opt.lora), "LoRA adapters merged into every --checkpoint")
    ("tokenizer", po::value<std::string>(&opt.tokenizer), "SentencePiece model")
    ("output,o", po::value<std::string>(&opt.output), "output directory")
    ("max-tasks", po::value<int64_t>(&opt.max_tasks)->default_value(opt.max_tasks), "first N tasks of the (100-capped) set; 0: all")
    ("num-samples", po::value<int64_t>(&opt.num_samples)->default_value(opt.num_samples), "samples per task (0: 100, codecontests 10)")
    ("max-new-tokens", po::value<int64_t>(&opt.max_new_tokens)->default_value(opt.max_new_tokens), "tokens per sample at most (at most the model's max_seq_len)")
    ("temperature", po::value<double>(&opt.temperature)->default_value(opt.temperature), "<= 0: greedy")
    ("top-p", po::value<double>(&opt.top_p)->default_value(opt.top_p), "nucleus mass")
    ("seed", po::value<uint64_t>(&opt.seed)->default_value(opt.seed), "sampling seed")
    ("speculative", po::value<int64_t>(&opt.speculative)->default_value(opt.speculative), "self-speculative K (1: plain)")
    ("batch-size", po::value<int64_t>(&opt.batch_size)->default_value(opt.batch_size),
     "a task's samples decoded together (plain or speculative)")
    ("dtype", po::value<std::string>(&opt.dtype)->default_value(opt.dtype), "fp32 or bf16")
    ("device", po::value<std::string>(&opt.device)->default_value(opt.device), "cpu, cuda or cuda:N")
    ("python", po::value<std::string>(&opt.python)->default_value(opt.python), "interpreter for generated programs")
    ("timeout", po::value<double>(&opt.limits.timeout_s)->default_value(opt.limits.timeout_s),
     "seconds per program run, in (0, 3600]")
    ("tensorboard", po::value<bool>(&opt.tracking.tensorboard)->default_value(opt.tracking.tensorboard),
     "TensorBoard events in OUTPUT/<checkpoint>/tensorboard")
    ("mlflow-uri", po::value<std::string>(&opt.tracking.mlflow_uri), "MLflow: file:///path/mlruns or http(s)://host:port")
    ("mlflow-experiment", po::value<std::string>(&opt.tracking.mlflow_experiment)->default_value("Default"),
     "MLflow experiment")
    ("allow-unisolated", po::bool_switch(&opt.allow_unisolated),
     "where the kernel allows no namespaces, run programs without them (loud warning). Given up: the network, "
     "PID, IPC and mount namespaces (a program reaches the network, sees the machine's processes, and reads and "
     "writes every file its uid may: the benchmark, checkpoints), the minimal read-only root and its tmpfs (a "
     "scratch directory under $TMPDIR instead), the PID namespace that ends every process a program started (a "
     "child that calls setsid() can outlive it), uid 65534 unless run as root (as a user: your uid), and the "
     "seccomp filter where the kernel refuses it. Kept: rlimits, a process group, a clean environment, uid "
     "65534 as root, and the seccomp filter (with no_new_privs) where the kernel takes it");
  // clang-format on
  prog.help_epilog(
      "Benchmark files are yours to fetch (compute nodes have no network); docs/evaluate.md lists the sources\n"
      "and licences: HumanEval (openai/human-eval, MIT), MBPP (google-research, CC BY 4.0), GSM8K (openai/\n"
      "grade-school-math, MIT), CodeContests (deepmind/code_contests, CC BY 4.0).\n");
  return prog.run([&](wmtp::ProgramContext& ctx) -> int {
    wmtp::run_evaluate(opt, ctx.mpi.world(), ctx.log);
    return 0;
  });
}
