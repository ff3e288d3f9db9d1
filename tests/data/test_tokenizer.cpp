// Tokenizer (through the dlopen()ed shim) with the tiny model, and the Alpaca template: exact strings,
// round trips, and where the prompt mask ends.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/alpaca.h"
#include "data/tokenizer.h"
#include "data_test_util.h"

namespace wmtp {
namespace {

TEST(Tokenizer, LoadsTinyModelWithLlamaSpecialIds) {
  Tokenizer tok = Tokenizer::load(test::tiny_tokenizer());
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.pad_id(), -1);
  EXPECT_EQ(tok.id_to_piece(1), "<s>");
  EXPECT_EQ(tok.id_to_piece(2), "</s>");
  EXPECT_EQ(tok.id_to_piece(3 + 0x0A), "<0x0A>");  // byte-fallback pieces follow the 3 specials
  EXPECT_EQ(tok.fingerprint().rfind("fnv1a64:", 0), 0u);
  EXPECT_FALSE(Tokenizer::shim_path().empty());
}

TEST(Tokenizer, RoundTripsEveryCorpusText) {
  Tokenizer tok = Tokenizer::load(test::tiny_tokenizer());
  int n = 0;
  for (const char* split : {"train", "valid"}) {
    for (const auto& v : test::read_jsonl(test::tiny_jsonl(split))) {
      for (const char* key : {"instruction", "output"}) {
        const std::string& text = v.at(key).as_string();
        std::vector<int32_t> ids = tok.encode(text);
        for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
        ASSERT_EQ(tok.decode(ids), text) << key;
        ++n;
      }
    }
  }
  EXPECT_GT(n, 700);
  // Text outside the training data (bytes never seen) survives through byte fallback.
  const std::string odd = "naïve ☃ 漢字 \t tabs\n\nand  double  spaces 0123456789";
  EXPECT_EQ(tok.decode(tok.encode(odd)), odd);
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(Tokenizer, ErrorsNameTheModelFile) {
  try {
    Tokenizer::load("/nonexistent/x.model");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/x.model"), std::string::npos);
  }
  const std::string junk = test::scratch_dir("tokenizer_junk") + "/junk.model";
  std::ofstream(junk) << "not a model";
  try {
    Tokenizer::load(junk);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("not a SentencePiece model"), std::string::npos) << e.what();
  }
  Tokenizer tok = Tokenizer::load(test::tiny_tokenizer());
  EXPECT_THROW(tok.decode({5, 100000}), Error);
  EXPECT_THROW(tok.id_to_piece(-1), Error);
}

// The template strings, written out independently of data/alpaca.cpp (weighted_mtp's, docs/data.md).
TEST(Alpaca, TemplateStringsAreExact) {
  EXPECT_EQ(format_alpaca("Add.", "", "x+1"),
            "Below is an instruction that describes a task. Write a response that appropriately completes the "
            "request.\n\n### Instruction:\nAdd.\n\n### Response:\nx+1");
  EXPECT_EQ(format_alpaca("Add.", "1 2", "3"),
            "Below is an instruction that describes a task, paired with an input that provides further context. "
            "Write a response that appropriately completes the request.\n\n### Instruction:\nAdd.\n\n### Input:\n1 "
            "2\n\n### Response:\n3");
  // "NO input" whenever input.strip() is empty.
  EXPECT_EQ(format_alpaca("A", " \n\t ", "B"), format_alpaca("A", "", "B"));
  EXPECT_EQ(format_alpaca_prompt("A", ""), format_alpaca("A", "", ""));
  const std::string p = format_alpaca_prompt("A", "");
  EXPECT_EQ(p.substr(p.size() - 14), "### Response:\n");
  EXPECT_TRUE(is_blank(""));
  EXPECT_TRUE(is_blank(" \r\n\x0b\x0c\x1c"));
  EXPECT_FALSE(is_blank(" x "));
}

TEST(Alpaca, PromptMaskEndsWhereTheSolutionBegins) {
  Tokenizer tok = Tokenizer::load(test::tiny_tokenizer());
  int with_input = 0, n = 0;
  for (const auto& v : test::read_jsonl(test::tiny_jsonl("train"))) {
    const std::string& ins = v.at("instruction").as_string();
    const std::string& in = v.at("input").as_string();
    const std::string& out = v.at("output").as_string();
    EncodedSample s = encode_alpaca_sample(tok, ins, in, out, /*append_eos=*/true);
    ASSERT_EQ(s.tokens.front(), tok.bos_id());
    ASSERT_EQ(s.tokens.back(), tok.eos_id());
    // prompt_length = BOS + tokens of the prompt alone (weighted_mtp's len_prompt).
    ASSERT_EQ(s.prompt_length, 1 + static_cast<int32_t>(tok.encode(format_alpaca_prompt(ins, in)).size()));
    ASSERT_TRUE(s.prompt_is_prefix) << ins;
    // The unmasked tokens are exactly the solution (+EOS); the masked ones exactly the prompt.
    std::vector<int32_t> prompt(s.tokens.begin() + 1, s.tokens.begin() + s.prompt_length);
    std::vector<int32_t> solution(s.tokens.begin() + s.prompt_length, s.tokens.end() - 1);
    ASSERT_EQ(tok.decode(prompt), format_alpaca_prompt(ins, in));
    ASSERT_EQ(tok.decode(solution), out);
    EncodedSample no_eos = encode_alpaca_sample(tok, ins, in, out, false);
    ASSERT_EQ(no_eos.tokens.size() + 1, s.tokens.size());
    ASSERT_EQ(no_eos.prompt_length, s.prompt_length);
    with_input += !is_blank(in);
    ++n;
  }
  EXPECT_GT(with_input, 0);  // both template variants are exercised
  EXPECT_LT(with_input, n);
}

TEST(Alpaca, DetectsBpeMergeAcrossTheBoundary) {
  Tokenizer tok = Tokenizer::load(test::tiny_tokenizer());
  // An output starting mid-word-piece: find one whose encoding does not extend the prompt's. If the
  // tiny vocabulary never merges across "\n", prompt_is_prefix must agree with a direct comparison.
  for (const char* out : {"def f(x):\n", " return", "\n", "### Response:\nabc", "e"}) {
    EncodedSample s = encode_alpaca_sample(tok, "I", "", out, false);
    std::vector<int32_t> prompt = tok.encode(format_alpaca_prompt("I", ""));
    prompt.insert(prompt.begin(), tok.bos_id());
    const bool prefix = s.tokens.size() >= prompt.size() && std::equal(prompt.begin(), prompt.end(), s.tokens.begin());
    EXPECT_EQ(s.prompt_is_prefix, prefix) << out;
  }
}

}  // namespace
}  // namespace wmtp

namespace wmtp {
namespace {

// The caching encoder preprocess-metadata uses gives exactly the uncached encoding, whether or not
// consecutive samples share their prompt.
TEST(Alpaca, CachingEncoderEqualsPlainEncoding) {
  Tokenizer tok = Tokenizer::load(test::tiny_tokenizer());
  std::vector<json::Value> lines = test::read_jsonl(test::tiny_jsonl("valid"));
  std::stable_sort(lines.begin(), lines.end(), [](const json::Value& a, const json::Value& b) {
    return a.at("instruction").as_string() < b.at("instruction").as_string();
  });
  AlpacaEncoder enc(tok, true);
  int repeats = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const json::Value& v = lines[i];
    EncodedSample a = enc.encode(v.at("instruction").as_string(), v.at("input").as_string(),
                                 v.at("output").as_string());
    EncodedSample b = encode_alpaca_sample(tok, v.at("instruction").as_string(), v.at("input").as_string(),
                                           v.at("output").as_string(), true);
    ASSERT_EQ(a.tokens, b.tokens);
    ASSERT_EQ(a.prompt_length, b.prompt_length);
    repeats += i > 0 && v.at("instruction").as_string() == lines[i - 1].at("instruction").as_string();
  }
  EXPECT_GT(repeats, 10);  // the cache was really exercised
}

}  // namespace
}  // namespace wmtp
