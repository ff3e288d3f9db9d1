// Texts too long for --max-length are not tokenized (a 50 MB line once cost 103 s and 12 GB only to
// be dropped). Checked here: the bound never claims more tokens than encode() gives (every corpus
// text, and adversarial ones); a huge line is dropped without tokenizing, counted as overlength;
// --on-overlength truncate on a cut text keeps exactly the first max_length ids of the whole text.
#include <gtest/gtest.h>

#include <fstream>

#include "data/alpaca.h"
#include "data/preprocess.h"
#include "data/preprocess_shard.h"
#include "data/tokenizer.h"
#include "data_test_util.h"

namespace wmtp {
namespace {

TEST(Overlength, TheBoundNeverExceedsTheTrueTokenCount) {
  Tokenizer tok = Tokenizer::load(test::tiny_tokenizer());
  ASSERT_GT(tok.max_token_bytes(), 0) << "the tiny model reproduces its input: a bound must exist";
  std::vector<std::string> texts = {"",
                                    " ",
                                    "          ",
                                    "\n\n\n\n",
                                    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                                    "0123456789012345678901234567890",
                                    "\xe6\xbc\xa2\xe5\xad\x97 \xf0\x9d\x94\x98"};
  for (const char* split : {"train", "valid"})
    for (const auto& v : test::read_jsonl(test::tiny_jsonl(split)))
      texts.push_back(format_alpaca(v.at("instruction").as_string(), "", v.at("output").as_string()));
  int64_t tight = 0;
  for (const std::string& t : texts) {
    const int64_t n = int64_t(tok.encode(t).size());
    ASSERT_LE(tok.min_tokens(int64_t(t.size())), n) << "bound above the true count for: " << t.substr(0, 80);
    tight = std::max(tight, tok.min_tokens(int64_t(t.size())));
  }
  EXPECT_GT(tight, 10) << "the bound is too weak to ever drop anything";
}

// One rank's pass over a file of `lines` with the given options.
LocalShard run_lines(const std::vector<std::string>& lines, const PreprocessOptions& opt, const Tokenizer& tok) {
  const std::string path = test::scratch_dir("overlength") + "/in.jsonl";
  {
    std::ofstream out(path);
    for (const auto& l : lines) out << l << "\n";
  }
  std::vector<InputFile> files = stat_input_files({path});
  return tokenize_rank_lines(files, rank_byte_range(files, 0, 1), tok, opt);
}

std::string sample_line(const std::string& output, const std::string& instruction = "Add two numbers.") {
  return R"({"instruction": ")" + instruction + R"(", "output": ")" + output +
         R"(", "task_id": "p_correct_0", "is_correct": true})";
}

TEST(Overlength, AHugeLineIsDroppedWithoutTokenizing) {
  Tokenizer tok = Tokenizer::load(test::tiny_tokenizer());
  PreprocessOptions opt;
  opt.max_length = 256;
  std::string huge;
  for (int i = 0; huge.size() < (8u << 20); ++i) huge += "def f" + std::to_string(i) + "(x): return x + 1 ";
  LocalShard sh = run_lines({sample_line("print(1)"), sample_line(huge), sample_line("print(2)")}, opt, tok);
  EXPECT_EQ(sh.size(), 2);
  EXPECT_EQ(sh.n_dropped_overlength, 1);
  EXPECT_EQ(sh.n_dropped_untokenized, 1) << "the 8 MB sample was tokenized before being dropped";
  opt.on_overlength = "truncate";  // a huge prompt: nothing of the solution could be kept
  sh = run_lines({sample_line("print(3)", huge)}, opt, tok);
  EXPECT_EQ(sh.n_dropped_prompt_too_long, 1);
  EXPECT_EQ(sh.n_dropped_untokenized, 1);
}

TEST(Overlength, TruncatingACutTextKeepsTheFirstIdsOfTheWholeText) {
  Tokenizer tok = Tokenizer::load(test::tiny_tokenizer());
  PreprocessOptions opt;
  opt.on_overlength = "truncate";
  opt.max_length = 200;
  std::string output;  // corpus solutions, so BPE merges as it does on real text
  for (const auto& v : test::read_jsonl(test::tiny_jsonl("train"))) {
    std::string o = v.at("output").as_string();
    for (char& c : o)
      if (c == '\n' || c == '"' || c == '\\') c = ' ';  // keep the JSON line simple
    output += o + " ";
    if (output.size() > 200000) break;
  }
  LocalShard sh = run_lines({sample_line(output)}, opt, tok);
  ASSERT_EQ(sh.size(), 1);
  EXPECT_EQ(sh.n_truncated, 1);
  EncodedSample whole = encode_alpaca_sample(tok, "Add two numbers.", "", output, true);
  ASSERT_GT(int64_t(whole.tokens.size()), 4 * opt.max_length);
  std::vector<int32_t> want(whole.tokens.begin(), whole.tokens.begin() + opt.max_length);
  EXPECT_EQ(sh.tokens, want);
  EXPECT_EQ(sh.prompt_length[0], whole.prompt_length);
}

}  // namespace
}  // namespace wmtp
