// merge-lora: fold LoRA adapters into their base weights (W += alpha/r * B A in fp32) and write a
// model-only HDF5 checkpoint or safetensors (Meta or HF names). Thin main over ckpt/lora_merge.h.
#include <optional>

#include "app/program.h"
#include "ckpt/lora_merge.h"
#include "ckpt/weight_export.h"
#include "core/error.h"
#include "core/output_path.h"
#include "comm/agree.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  wmtp::Program prog(
      argc, argv,
      {"merge-lora",
       "Merge LoRA adapters into their base model (W += alpha/r * B A in fp32) and write a model-only "
       "HDF5 checkpoint or safetensors with Meta or HF names. Adapters come from a wmtp checkpoint "
       "(adapter-only or full) or a PEFT directory; the base from a wmtp checkpoint, Meta-named "
       "safetensors or an HF directory.",
       "bin/merge-lora --base checkpoints/base/model.h5 --lora checkpoints/run/step_00000100.h5 --output merged.h5"});
  wmtp::MergeOptions opt;
  // One option per line:
  // clang-format off
  prog.options().add_options()
    ("base,b", po::value<std::string>(&opt.base), "base weights: wmtp checkpoint (.h5), Meta safetensors, or HF directory")
    ("base-format", po::value<std::string>(&opt.base_format)->default_value(opt.base_format), "auto | h5 | meta | hf")
    ("params", po::value<std::string>(&opt.params_json), "params.json for a Meta safetensors base (default: beside it)")
    ("lora,l", po::value<std::string>(&opt.lora), "adapters: wmtp checkpoint or PEFT directory (omit: adapters in the base file)")
    ("output,o", po::value<std::string>(&opt.output), "merged output: a .h5 file, or a directory for safetensors")
    ("output-format", po::value<std::string>(&opt.output_format)->default_value(opt.output_format),
     "auto (.h5 -> h5, else meta) | h5 | meta | hf")
    ("dtype", po::value<std::string>(&opt.dtype)->default_value(opt.dtype), "fp32 or bf16")
    ("ignore-fingerprint", po::bool_switch(&opt.ignore_fingerprint),
     "merge even if the adapters were trained on a different base");
  // clang-format on
  prog.help_epilog(
      "PEFT adapters: convert-checkpoint export --format peft writes one from a LoRA checkpoint;\n"
      "convert-checkpoint import --from peft turns one into a LoRA checkpoint. merge-lora reads both kinds.\n");
  return prog.run([&](wmtp::ProgramContext& ctx) -> int {
    // Where the result goes is checked before any work: a usage error (exit 2), nothing left behind
    // (a directory made here goes again if the merge fails).
    const bool to_file = opt.output_format == "h5" || (opt.output_format == "auto" && opt.output.size() > 3 &&
                                                       opt.output.compare(opt.output.size() - 3, 3, ".h5") == 0);
    std::optional<wmtp::OutputCleanup> made;
    wmtp::on_rank0(ctx.mpi.world(), [&] {
      if (to_file) {
        wmtp::check_output_file(opt.output, "--output");
      } else {
        made.emplace(opt.output);
        wmtp::check_output_dir(opt.output, "--output");
      }
    });
    const int64_t n = wmtp::merge_lora_weights(opt, ctx.mpi.world());
    if (made) made->done();
    ctx.log.info("merged %lld LoRA projection(s) into %s -> %s", static_cast<long long>(n), opt.base.c_str(),
                 opt.output.c_str());
    return 0;
  });
}
