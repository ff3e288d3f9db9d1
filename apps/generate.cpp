// generate: completions for a prompts JSONL from a wmtp model (head-0 decoding with a KV cache, or
// self-speculative decoding with the MTP heads). Thin main over eval/generate.h.
#include "app/program.h"
#include "eval/generate.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"generate",
                      "Generate completions for prompts (JSONL, one {\"prompt\", \"id\"} per line) with a wmtp model "
                      "file or checkpoint (LoRA adapters merged on load): greedy or nucleus sampling, head-0 decoding "
                      "with a KV cache or self-speculative decoding (--speculative K: heads 1..K-1 draft, head 0 "
                      "verifies). Prompts are split across ranks; the output is the same at any rank count.",
                      "mpirun -np 4 bin/generate --checkpoint model.h5 --tokenizer tokenizer.model --prompts p.jsonl "
                      "--output out.jsonl --speculative 4"});
  wmtp::GenerateOptions opt;
  // One option per line:
  // clang-format off
  prog.options().add_options()
    ("checkpoint", po::value<std::string>(&opt.checkpoint), "model file or checkpoint (.h5)")
    ("lora", po::value<std::string>(&opt.lora), "LoRA adapters (a LoRA run's checkpoint) merged into --checkpoint")
    ("tokenizer", po::value<std::string>(&opt.tokenizer), "SentencePiece model")
    ("prompts", po::value<std::string>(&opt.prompts), "input JSONL: {\"prompt\": ..., \"id\": ...} per line")
    ("output,o", po::value<std::string>(&opt.output), "output JSONL: {id, sample, text, tokens, finish_reason}")
    ("max-new-tokens", po::value<int64_t>(&opt.max_new_tokens)->default_value(opt.max_new_tokens), "tokens per completion at most (at most the model's max_seq_len)")
    ("num-samples", po::value<int64_t>(&opt.num_samples)->default_value(opt.num_samples), "completions per prompt")
    ("temperature", po::value<double>(&opt.temperature)->default_value(opt.temperature), "<= 0: greedy")
    ("top-p", po::value<double>(&opt.top_p)->default_value(opt.top_p), "nucleus mass (sampling)")
    ("seed", po::value<uint64_t>(&opt.seed)->default_value(opt.seed), "sampling seed (one stream per prompt and sample)")
    ("stop", po::value<std::vector<std::string>>(&opt.stop), "stop sequence (repeatable); the text ends before it")
    ("speculative", po::value<int64_t>(&opt.speculative)->default_value(opt.speculative),
     "K in [2, n_future]: self-speculative decoding with heads 1..K-1 drafting; 1: plain")
    ("batch-size", po::value<int64_t>(&opt.batch_size)->default_value(opt.batch_size),
     "sequences ((prompt, sample) pairs in input order) decoded together, plain or speculative, each row with its "
     "own cache length; fp32 output is the same at any batch size")
    ("dtype", po::value<std::string>(&opt.dtype)->default_value(opt.dtype), "fp32 or bf16")
    ("device", po::value<std::string>(&opt.device)->default_value(opt.device), "cpu, cuda or cuda:N");
  // clang-format on
  return prog.run([&](wmtp::ProgramContext& ctx) -> int {
    wmtp::DecodeStats s = wmtp::run_generate(opt, ctx.mpi.world(), ctx.log);
    ctx.log.info("wrote %s: %lld tokens in %lld forwards (%.3f tokens per forward)", opt.output.c_str(),
                 static_cast<long long>(s.tokens), static_cast<long long>(s.forwards),
                 s.forwards > 0 ? static_cast<double>(s.tokens) / static_cast<double>(s.forwards) : 0.0);
    for (size_t k = 0; k < s.drafted.size(); ++k)
      ctx.log.info("head %zu drafts: %lld verified, %lld accepted (%.3f)", k + 1, static_cast<long long>(s.drafted[k]),
                   static_cast<long long>(s.accepted[k]),
                   s.drafted[k] > 0 ? static_cast<double>(s.accepted[k]) / static_cast<double>(s.drafted[k]) : 0.0);
    return 0;
  });
}
