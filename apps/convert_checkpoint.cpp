// convert-checkpoint: move weights between wmtp HDF5 checkpoints and safetensors (Meta or HF names,
// PEFT adapters); inspect and verify checkpoints. Thin main over ckpt/weight_import.h,
// ckpt/weight_export.h and ckpt/inspect.h; see docs/checkpoint-format.md.
#include <iostream>
#include <optional>

#include "app/program.h"
#include "ckpt/inspect.h"
#include "ckpt/weight_export.h"
#include "ckpt/weight_import.h"
#include "core/error.h"
#include "core/output_path.h"
#include "comm/agree.h"

namespace po = boost::program_options;

namespace {

uint64_t parse_size(const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    wmtp::throw_usage("--max-shard-size '", s, "' is not a size (e.g. 5GB, 500MiB, 1000000)");
  }
  const std::string unit = s.substr(pos);
  const std::pair<const char*, double> units[] = {
      {"", 1},     {"B", 1},        {"KB", 1e3},        {"MB", 1e6},
      {"GB", 1e9}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  for (auto [u, f] : units)
    if (unit == u && v > 0) return uint64_t(v * f);
  wmtp::throw_usage("--max-shard-size '", s, "' is not a size (e.g. 5GB, 500MiB, 1000000)");
}

// The command line: the options below write here.
struct ConvertArgs {
  std::vector<std::string> command;
  wmtp::ImportOptions imp;
  std::string names = "meta", format, dtype = "fp32", max_shard = "5GB";
  bool print_config = false;
};

void add_options(wmtp::Program& prog, ConvertArgs& a) {
  // One option per line:
  // clang-format off
  prog.options().add_options()
    ("command", po::value<std::vector<std::string>>(&a.command), "import | export | inspect PATH | verify PATH")
    ("from", po::value<std::string>(&a.imp.from), "import: meta (Meta-named safetensors + params.json), hf (HF "
     "directory), peft (PEFT adapter directory)")
    ("input,i", po::value<std::string>(&a.imp.input), "input file or directory")
    ("output,o", po::value<std::string>(&a.imp.output), "output: .h5 file (import) or directory (export)")
    ("params", po::value<std::string>(&a.imp.params_json), "params.json (import meta: default beside the input; "
     "import peft: model args when there is no --base)")
    ("base", po::value<std::string>(&a.imp.base), "import peft: the base checkpoint (model args + fingerprint)")
    ("names", po::value<std::string>(&a.names)->default_value(a.names), "export: meta or hf tensor names")
    ("format", po::value<std::string>(&a.format), "export: peft to write the LoRA adapters as a PEFT directory")
    ("dtype", po::value<std::string>(&a.dtype)->default_value(a.dtype), "fp32 or bf16 (export; stored dtype on import)")
    ("max-shard-size", po::value<std::string>(&a.max_shard)->default_value(a.max_shard),
     "export: split safetensors into shards of at most this size (HF index)")
    ("config", po::bool_switch(&a.print_config), "inspect: print the stored config TOML");
  // clang-format on
  prog.positional("command", -1);
  prog.help_epilog(
      "Commands:\n"
      "  import --from meta --input W.safetensors [--params params.json] --output model.h5\n"
      "  import --from hf   --input HF_DIR --output model.h5          (names mapped, q/k un-permuted)\n"
      "  import --from peft --input PEFT_DIR --base model.h5 --output adapter.h5\n"
      "  export --input CKPT.h5 --output DIR [--names meta|hf] [--dtype fp32|bf16]\n"
      "  export --input LORA_CKPT.h5 --output DIR --format peft\n"
      "  inspect PATH [--config]     (a checkpoint, or a safetensors file/directory)\n"
      "  verify PATH                 (finite values, checksums, shapes against the model args)\n"
      "Errors in inputs (missing, truncated, malformed, mismatched shapes) exit 2 and leave no output behind.\n");
}

int run_import(wmtp::ImportOptions imp, wmtp::StoreDtype dtype, wmtp::ProgramContext& ctx) {
  wmtp::on_rank0(ctx.mpi.world(), [&] { wmtp::check_output_file(imp.output, "--output"); });  // before any work: exit 2
  imp.dtype = dtype;
  wmtp::import_weights(imp, ctx.mpi.world());
  ctx.log.info("imported %s (%s) -> %s", imp.input.c_str(), imp.from.c_str(), imp.output.c_str());
  return 0;
}

int run_export(const ConvertArgs& a, wmtp::StoreDtype dtype, wmtp::ProgramContext& ctx) {
  wmtp::ExportOptions ex;
  ex.input = a.imp.input;
  ex.output = a.imp.output;
  ex.format = a.format.empty() ? a.names : a.format;
  if (!a.format.empty() && a.format != "peft") wmtp::throw_usage("--format must be peft (use --names for meta/hf)");
  if (ex.format != "meta" && ex.format != "hf" && ex.format != "peft")
    wmtp::throw_usage("--names must be meta or hf, got '", a.names, "'");
  ex.dtype = dtype;
  ex.max_shard_bytes = parse_size(a.max_shard);
  // Before any work: exit 2. A directory made here goes again if the export fails.
  std::optional<wmtp::OutputCleanup> made;
  wmtp::on_rank0(ctx.mpi.world(), [&] {
    made.emplace(ex.output);
    wmtp::check_output_dir(ex.output, "--output");
  });
  // One writer; the other ranks wait and share its verdict.
  wmtp::on_rank0(ctx.mpi.world(), [&] {
    for (const auto& f : wmtp::export_weights(ex)) ctx.log.info("wrote %s", f.c_str());
  });
  if (made) made->done();
  return 0;
}

int run_verify(const std::string& path, wmtp::ProgramContext& ctx) {
  if (path.empty()) wmtp::throw_usage("verify needs a path");
  wmtp::VerifyReport rep = wmtp::verify_checkpoint(path, ctx.mpi.world());
  if (ctx.mpi.rank() == 0) {
    for (const auto& p : rep.problems) std::cout << "problem: " << p << "\n";
    std::cout << path << ": " << rep.tensors << " tensors, " << rep.elements << " elements, " << rep.problems.size()
              << " problem(s)\n";
  }
  if (!rep.problems.empty()) wmtp::throw_input_agreed(path, ": verify found ", rep.problems.size(), " problem(s)");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  wmtp::Program prog(
      argc, argv,
      {"convert-checkpoint",
       "Move weights between wmtp HDF5 checkpoints and safetensors (Meta or HF names, PEFT adapters); "
       "inspect and verify checkpoints. Runs as one process or under mpirun (import and verify then "
       "share the work).",
       "bin/convert-checkpoint export --input checkpoints/run/step_00000100.h5 --output out/ --names hf --dtype bf16"});
  ConvertArgs a;
  add_options(prog, a);
  return prog.run([&](wmtp::ProgramContext& ctx) -> int {
    if (a.command.empty()) wmtp::throw_usage("missing command: import, export, inspect or verify (see --help)");
    const std::string cmd = a.command[0];
    if (a.command.size() > 2 || (a.command.size() == 2 && cmd != "inspect" && cmd != "verify"))
      wmtp::throw_usage("unexpected argument '", a.command.back(), "' (see --help)");
    if (a.command.size() == 2) a.imp.input = a.command[1];
    const wmtp::StoreDtype store_dtype = wmtp::parse_store_dtype(a.dtype);
    if (cmd == "import") return run_import(a.imp, store_dtype, ctx);
    if (cmd == "export") return run_export(a, store_dtype, ctx);
    if (cmd == "inspect") {
      if (a.imp.input.empty()) wmtp::throw_usage("inspect needs a path");
      if (ctx.mpi.rank() == 0) wmtp::inspect_weights(a.imp.input, std::cout, a.print_config);
      return 0;
    }
    if (cmd == "verify") return run_verify(a.imp.input, ctx);
    wmtp::throw_usage("unknown command '", cmd, "': import, export, inspect or verify");
  });
}
