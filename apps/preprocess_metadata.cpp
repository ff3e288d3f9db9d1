// preprocess-metadata: tokenize JSONL problem/solution samples (weighted_mtp schema) into one HDF5
// dataset per split (token ids, offsets, prompt lengths, metadata table, problem index, statistics).
// Thin main over data/preprocess.h; see docs/data.md for the file format.
#include "app/program.h"
#include "core/error.h"
#include "data/preprocess.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"preprocess-metadata",
                      "Tokenize JSONL problem/solution samples (weighted_mtp schema: instruction, input, output, "
                      "task_id, is_correct, metadata.difficulty) with a SentencePiece model into one HDF5 dataset "
                      "for one split: token ids (BOS + Alpaca template + solution + EOS), offsets, prompt lengths, "
                      "per-sample metadata, the problem index and statistics. Ranks tokenize disjoint line ranges "
                      "and write in parallel; the output appears atomically (<output>.tmp, fsync, rename). Run it "
                      "once per split.",
                      "mpirun -np 4 bin/preprocess-metadata --input data/tiny/train.jsonl "
                      "--tokenizer build/data/tiny.model --output build/data/tiny/train.h5 --max-length 2048"});
  wmtp::PreprocessOptions opt;
  std::string on_overlength = opt.on_overlength;
  bool no_eos = false;
  // One option per line:
  // clang-format off
  prog.options().add_options()
    ("input,i", po::value<std::vector<std::string>>(&opt.inputs)->composing(),
     "JSONL input file (repeatable: the files are one split, concatenated in order)")
    ("tokenizer,t", po::value<std::string>(&opt.tokenizer), "SentencePiece model file (.model)")
    ("output,o", po::value<std::string>(&opt.output), "HDF5 file to write (parent directories are created)")
    ("max-length", po::value<int64_t>(&opt.max_length)->default_value(opt.max_length),
     "most tokens per sample, BOS and EOS included (0 = no limit)")
    ("on-overlength", po::value<std::string>(&on_overlength)->default_value(on_overlength),
     "longer samples: 'drop' them, or 'truncate' them from the right (dropped if no solution token is left)")
    ("no-eos", po::bool_switch(&no_eos), "do not append EOS to the solution (weighted_mtp did not)")
    ("skip-bad-lines", po::bool_switch(&opt.skip_bad_lines),
     "skip and count malformed lines instead of failing (the first few are named)")
    ("report-bad-lines", po::value<int64_t>(&opt.report_bad_lines)->default_value(opt.report_bad_lines),
     "how many bad lines to name");
  // clang-format on
  prog.help_epilog(
      "Input: one JSON object per line: {\"instruction\": str, \"input\": str (optional), \"output\": str,\n"
      "  \"task_id\": \"<problem>_correct_<n>\" | \"<problem>_incorrect_<n>\", \"is_correct\": bool,\n"
      "  \"metadata\": {\"difficulty\": int|null, ...} (optional)}. The problem id is task_id without the suffix.\n"
      "Bad input (malformed JSON, missing or mistyped fields, invalid UTF-8, empty lines or files) stops with\n"
      "exit code 2 naming file:line, unless --skip-bad-lines. No partial output is ever left at --output.\n"
      "Tiny tokenizer for the bundled corpus: data/make_tokenizer.sh build/data/tiny (-> build/data/tiny.model).\n");
  return prog.run([&](wmtp::ProgramContext& ctx) -> int {
    opt.on_overlength = on_overlength;
    opt.append_eos = !no_eos;
    ctx.log.info("preprocess-metadata: %zu input file(s) -> %s on %d rank(s)", opt.inputs.size(), opt.output.c_str(),
                 ctx.mpi.world_size());
    wmtp::PreprocessResult r = wmtp::preprocess_dataset(ctx.mpi.world(), opt, ctx.log);
    std::string summary = r.stats.describe();
    if (!summary.empty() && summary.back() == '\n') summary.pop_back();
    ctx.log.info("wrote %s in %.2f s (%.0f samples/s):\n%s", opt.output.c_str(), r.seconds,
                 r.stats.n_lines / std::max(r.seconds, 1e-9), summary.c_str());
    return 0;
  });
}
