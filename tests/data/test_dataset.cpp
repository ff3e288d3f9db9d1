// Dataset reader on the tiny datasets made by the `wmtp_tiny_data` fixture (preprocess-metadata on
// data/tiny/*.jsonl): every fact in the file checked against the JSONL read independently, partial
// token reads, corrupt files, and batches end to end.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <hdf5.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "core/error.h"
#include "data/alpaca.h"
#include "data/collate.h"
#include "data/dataset.h"
#include "data/sample_record.h"
#include "data/sampler.h"
#include "data/tokenizer.h"
#include "data_test_util.h"

namespace wmtp {
namespace {

std::string problem_of(const std::string& task_id) {
  return std::regex_replace(task_id, std::regex("_(correct|incorrect)_[0-9]+$"), "");
}

TEST(Dataset, MatchesTheJsonlItWasMadeFrom) {
  Dataset ds = Dataset::open(test::tiny_dataset("train"));
  Tokenizer tok = Tokenizer::load(test::tiny_tokenizer());
  std::vector<json::Value> lines = test::read_jsonl(test::tiny_jsonl("train"));
  ASSERT_EQ(ds.size(), static_cast<int64_t>(lines.size()));  // nothing over 2048 tokens in the tiny corpus
  EXPECT_EQ(ds.header().bos_id, 1);
  EXPECT_EQ(ds.header().eos_id, 2);
  EXPECT_EQ(ds.header().vocab_size, tok.vocab_size());
  EXPECT_EQ(ds.header().tokenizer_fingerprint, tok.fingerprint());
  EXPECT_EQ(ds.header().prompt_template, "alpaca");
  EXPECT_TRUE(ds.header().append_eos);
  EXPECT_EQ(ds.header().source_files, std::vector<std::string>{test::tiny_jsonl("train")});

  std::map<std::string, int64_t> first_seen;
  std::vector<std::string> order;
  std::vector<int64_t> all_rows;
  for (int64_t i = 0; i < ds.size(); ++i) {
    const json::Value& v = lines[i];
    const std::string task = v.at("task_id").as_string();
    ASSERT_EQ(ds.task_id(i), task);
    ASSERT_EQ(ds.samples().is_correct[i] != 0, v.at("is_correct").as_bool());
    const json::Value* d = v.at("metadata").find("difficulty");
    ASSERT_EQ(ds.samples().difficulty[i], d ? static_cast<int32_t>(d->as_int()) : kNoDifficulty);
    const std::string prob = problem_of(task);
    if (first_seen.emplace(prob, static_cast<int64_t>(order.size())).second) order.push_back(prob);
    ASSERT_EQ(ds.samples().problem[i], first_seen[prob]);
    // Simple metadata kept except difficulty, in order.
    json::Value kept = json::Value::object();
    for (const auto& [k, x] : v.at("metadata").as_object())
      if (k != "difficulty") kept.set(k, x);
    ASSERT_EQ(ds.metadata_json(i), json::dump(kept));
    all_rows.push_back(i);
  }
  EXPECT_EQ(ds.problems().ids, order);

  // Tokens: BOS, prompt (exactly the template), solution (exactly the output), EOS.
  std::vector<TokenizedSample> all = ds.read(all_rows);
  for (int64_t i = 0; i < ds.size(); ++i) {
    const TokenizedSample& s = all[i];
    const json::Value& v = lines[i];
    ASSERT_EQ(s.index, i);
    ASSERT_EQ(static_cast<int32_t>(s.tokens.size()), ds.samples().length[i]);
    ASSERT_EQ(s.tokens.front(), 1);
    ASSERT_EQ(s.tokens.back(), 2);
    ASSERT_EQ(tok.decode({s.tokens.begin() + 1, s.tokens.begin() + s.prompt_length}),
              format_alpaca_prompt(v.at("instruction").as_string(), v.at("input").as_string()));
    ASSERT_EQ(tok.decode({s.tokens.begin() + s.prompt_length, s.tokens.end() - 1}), v.at("output").as_string());
  }

  // Problem index and statistics, recounted from the JSONL.
  std::map<std::string, std::pair<int64_t, int64_t>> counts;
  int64_t n_correct = 0;
  for (const auto& v : lines) {
    const bool ok = v.at("is_correct").as_bool();
    n_correct += ok;
    auto& c = counts[problem_of(v.at("task_id").as_string())];
    (ok ? c.first : c.second)++;
  }
  int64_t pairs = 0, valid = 0;
  for (int64_t p = 0; p < ds.problems().size(); ++p) {
    const auto& c = counts[ds.problems().ids[p]];
    ASSERT_EQ(ds.problems().n_correct(p), c.first);
    ASSERT_EQ(ds.problems().n_incorrect(p), c.second);
    for (int64_t row : ds.problems().correct_of(p)) ASSERT_EQ(ds.samples().problem[row], p);
    pairs += std::min(c.first, c.second);
    valid += c.first > 0 && c.second > 0;
  }
  DatasetStats st = ds.stats();
  EXPECT_EQ(st.n_lines, static_cast<int64_t>(lines.size()));
  EXPECT_EQ(st.n_samples, ds.size());
  EXPECT_EQ(st.n_correct, n_correct);
  EXPECT_EQ(st.n_incorrect, ds.size() - n_correct);
  EXPECT_EQ(st.n_problems, static_cast<int64_t>(counts.size()));
  EXPECT_EQ(st.n_valid_problems, valid);
  EXPECT_EQ(st.total_possible_pairs, pairs);
  EXPECT_EQ(st.n_tokens, ds.header().n_tokens);
  EXPECT_EQ(st.length.max, *std::max_element(ds.samples().length.begin(), ds.samples().length.end()));
  int64_t hist_total = 0;
  for (int64_t c : st.difficulty_counts) hist_total += c;
  EXPECT_EQ(hist_total + st.n_no_difficulty, ds.size());
}

TEST(Dataset, ReadsOnlyTheRequestedSamples) {
  Dataset ds = Dataset::open(test::tiny_dataset("train"));
  EXPECT_EQ(ds.tokens_read(), 0);  // open() reads metadata only
  std::vector<int64_t> want{17, 3, 250, 3, 18, 100};
  std::vector<TokenizedSample> got = ds.read(want);
  ASSERT_EQ(got.size(), want.size());
  int64_t expected_read = 0;
  for (int64_t i : {3, 17, 18, 100, 250}) expected_read += ds.samples().length[i];
  EXPECT_EQ(ds.tokens_read(), expected_read);  // union of the ranges, each once
  EXPECT_LT(ds.tokens_read(), ds.header().n_tokens / 10);
  Dataset other = Dataset::open(test::tiny_dataset("train"));
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(got[k].index, want[k]);
    EXPECT_EQ(got[k].tokens, other.read_one(want[k]).tokens);
  }
  EXPECT_EQ(got[1].tokens, got[3].tokens);
  EXPECT_THROW(ds.read({ds.size()}), Error);
}

TEST(Dataset, RejectsFilesThatAreNotDatasets) {
  const std::string dir = test::scratch_dir("dataset_corrupt");
  auto expect_input_error = [](const std::string& path, const std::string& words) {
    try {
      Dataset::open(path);
      ADD_FAILURE() << "no error for " << path;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input);
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_input_error(dir + "/absent.h5", "not an HDF5 file");
  expect_input_error(test::tiny_jsonl("valid"), "not an HDF5 file");
  // A cut-off copy of a real dataset.
  const std::string cut = dir + "/cut.h5";
  std::filesystem::copy_file(test::tiny_dataset("valid"), cut);
  std::filesystem::resize_file(cut, std::filesystem::file_size(cut) / 2);
  try {
    Dataset::open(cut);
    ADD_FAILURE() << "a truncated file opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(cut), std::string::npos) << e.what();
  }
  // An HDF5 file without the format attribute.
  const std::string plain = dir + "/plain.h5";
  hid_t f = H5Fcreate(plain.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  H5Fclose(f);
  expect_input_error(plain, "not a wmtp dataset");
}

TEST(Dataset, BatchesEndToEnd) {
  Dataset ds = Dataset::open(test::tiny_dataset("train"));
  Tokenizer tok = Tokenizer::load(test::tiny_tokenizer());
  DataConfig cfg;
  cfg.pairwise = true;
  cfg.max_length = 512;
  Sampler s(ds.metadata(), cfg, Split::Train);
  ASSERT_EQ(s.size(), ds.stats().total_possible_pairs);  // n_samples = 0, no cap, no bins: every pair
  GlobalBatchIterator it(s, BatchGeometry{8, 2, 2, 1});
  GlobalBatchItems step = it.next();
  CollateOptions opt = CollateOptions::from(cfg, ds.header());
  PairBatch pb = load_pair_batch(ds, step.micro_batches[0], opt);
  ASSERT_EQ(pb.pos.tokens.size(0), 2);
  EXPECT_EQ(pb.pos.tokens.size(1) % 8, 0);
  EXPECT_TRUE((pb.pos.is_correct == 1).all().item<bool>());
  EXPECT_TRUE((pb.neg.is_correct == 0).all().item<bool>());
  Batch b = load_batch(ds, step.micro_batches[1], opt);
  for (int64_t r = 0; r < b.batch_size(); ++r) {
    // The unmasked labels are the solution and EOS of that sample.
    at::Tensor lab = b.labels[r];
    at::Tensor kept = lab.masked_select(lab != kIgnoreIndex);
    std::vector<int32_t> ids(kept.data_ptr<int64_t>(), kept.data_ptr<int64_t>() + kept.numel());
    ASSERT_EQ(ids.back(), 2);
    ids.pop_back();
    TokenizedSample s1 = ds.read_one(b.sample_index[r]);
    EXPECT_EQ(ids, std::vector<int32_t>(s1.tokens.begin() + s1.prompt_length, s1.tokens.end() - 1));
    EXPECT_FALSE(tok.decode(ids).empty());
  }
  EXPECT_THROW(load_pair_batch(ds, {DataItem{0, -1, 0}}, opt), Error);
}

// A token id with no row in the vocabulary the file declares (corrupt file, or a file made with
// another tokenizer than its header says) is an input error naming the file, the sample and both
// numbers — not LibTorch's "index out of range in self" in the middle of a step.
TEST(Dataset, ATokenIdBeyondTheVocabularyIsAnInputError) {
  const std::string path = test::scratch_dir("dataset_vocab") + "/small_vocab.h5";
  std::filesystem::copy_file(test::tiny_dataset("valid"), path);
  {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t a = H5Aopen(f, "vocab_size", H5P_DEFAULT);
    ASSERT_GE(a, 0);
    const int64_t small = 100;  // the tiny model has 512 pieces: most samples hold larger ids
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT64, &small), 0);
    H5Aclose(a);
    H5Fclose(f);
  }
  Dataset ds = Dataset::open(path);
  ASSERT_EQ(ds.header().vocab_size, 100);
  try {
    for (int64_t i = 0; i < ds.size(); ++i) ds.read_one(i);
    ADD_FAILURE() << "every sample read although ids reach 511";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("vocabulary of 100 ids"), std::string::npos) << what;
    EXPECT_NE(what.find("token id "), std::string::npos) << what;
  }
}

// label_coverage (from the sample table, at start-up) agrees with what collation then produces, and
// a max_length every prompt reaches leaves no label at all (the run must be refused, not train on 0).
TEST(Dataset, LabelCoverageMatchesTheCollatedLabels) {
  Dataset ds = Dataset::open(test::tiny_dataset("train"));
  DataConfig cfg;
  cfg.pairwise = true;
  Sampler s(ds.metadata(), cfg, Split::Train);
  const std::vector<DataItem> items(s.items().begin(), s.items().begin() + 24);
  int32_t min_prompt = INT32_MAX;
  for (const DataItem& it : items)
    for (int64_t row : {it.pos, it.neg}) min_prompt = std::min(min_prompt, ds.samples().prompt_length[size_t(row)]);
  for (int64_t max_length : {int64_t(512), int64_t(120), int64_t(min_prompt) + 1, int64_t(min_prompt)}) {
    cfg.max_length = max_length;
    PairBatch pb = load_pair_batch(ds, items, CollateOptions::from(cfg, ds.header()));
    int64_t rows_without = 0;
    for (const Batch* b : {&pb.pos, &pb.neg})
      rows_without += ((b->labels != kIgnoreIndex).sum(1) == 0).sum().item<int64_t>();
    LabelCoverage c = label_coverage(ds.samples(), items, max_length);
    EXPECT_EQ(c.samples, 48);
    EXPECT_EQ(c.label_tokens, pb.pos.n_label_tokens + pb.neg.n_label_tokens) << "max_length " << max_length;
    EXPECT_EQ(c.without_labels, rows_without) << "max_length " << max_length;
    if (max_length == min_prompt) {
      EXPECT_EQ(c.without_labels, c.samples) << "every prompt reaches the limit";
    }
  }
}

}  // namespace
}  // namespace wmtp
