// Sampler: determinism, the selection rules (checked against an independent Python implementation of
// weighted_mtp's selection (docs/data.md) and against direct counting), world-size independence of the step blocks, rank
// shares, and exact cursor resume. Pure functions: every world size is tested in one process.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "data/sample_record.h"
#include "data/sampler.h"
#include "test_util.h"

namespace wmtp {
namespace {

// Random problems (0..6 correct, 0..6 incorrect solutions, lengths 5..600, some without difficulty),
// their samples interleaved as in a real file.
DatasetMetadata synthetic_metadata(uint64_t seed, int n_problems) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
  auto next = [&](uint64_t n) {  // splitmix64, portable
    s += 0x9E3779B97F4A7C15ULL;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return (z ^ (z >> 31)) % n;
  };
  DatasetMetadata m;
  std::vector<std::pair<int32_t, bool>> pending;
  for (int p = 0; p < n_problems; ++p) {
    m.problems.ids.push_back("prob" + std::to_string(p));
    m.problems.difficulty.push_back(next(10) == 0 ? kNoDifficulty : static_cast<int32_t>(next(14)) - 1);
    for (uint64_t k = next(7); k > 0; --k) pending.push_back({p, true});
    for (uint64_t k = next(7); k > 0; --k) pending.push_back({p, false});
  }
  for (size_t i = pending.size(); i > 1; --i) std::swap(pending[i - 1], pending[next(i)]);
  std::vector<int32_t> sol;
  for (auto [p, ok] : pending) {
    m.samples.problem.push_back(p);
    m.samples.is_correct.push_back(ok);
    m.samples.difficulty.push_back(m.problems.difficulty[p]);
    m.samples.prompt_length.push_back(10);
    sol.push_back(5 + static_cast<int32_t>(next(596)));
    m.samples.length.push_back(10 + sol.back());
  }
  m.samples.offsets.assign(1, 0);
  for (int32_t l : m.samples.length) m.samples.offsets.push_back(m.samples.offsets.back() + l);
  build_problem_lists(m.problems, m.samples.problem, m.samples.is_correct, sol);
  return m;
}

DataConfig binned_config(int64_t seed, int64_t n) {
  DataConfig c;
  c.seed = seed;
  c.n_samples = n;
  c.pairwise = true;
  c.difficulty_bins = {0, 3, 4, 8, 9, 12};
  c.difficulty_weights = {1.0, 2.0, 1.0};
  c.max_pairs_per_problem = 3;
  return c;
}

TEST(Sampler, SameSeedSameListOtherSeedOtherList) {
  DatasetMetadata m = synthetic_metadata(1, 80);
  Sampler a(m, binned_config(42, 60), Split::Train), b(m, binned_config(42, 60), Split::Train);
  Sampler c(m, binned_config(43, 60), Split::Train);
  EXPECT_EQ(a.items(), b.items());
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_NE(a.items(), c.items());
  EXPECT_NE(a.fingerprint(), c.fingerprint());
  EXPECT_EQ(a.epoch_order(3), b.epoch_order(3));
  EXPECT_NE(a.epoch_order(0), a.epoch_order(1));
}

TEST(Sampler, DifficultyPairsAreUniqueValidAndCapped) {
  DatasetMetadata m = synthetic_metadata(2, 120);
  DataConfig cfg = binned_config(7, 100);
  Sampler s(m, cfg, Split::Train);
  ASSERT_EQ(s.size(), 100);
  std::set<int64_t> used;
  std::map<int32_t, int> per_problem;
  std::vector<int> per_bin(3, 0);
  for (const DataItem& it : s.items()) {
    ASSERT_TRUE(used.insert(it.pos).second) << "sample reused";
    ASSERT_TRUE(used.insert(it.neg).second) << "sample reused";
    ASSERT_TRUE(m.samples.is_correct[it.pos]);
    ASSERT_FALSE(m.samples.is_correct[it.neg]);
    ASSERT_EQ(m.samples.problem[it.pos], it.problem);
    ASSERT_EQ(m.samples.problem[it.neg], it.problem);
    ASSERT_LE(++per_problem[it.problem], cfg.max_pairs_per_problem);
    const int32_t d = m.problems.difficulty[it.problem];
    ASSERT_NE(d, kNoDifficulty);
    ASSERT_TRUE(d >= 0 && d <= 12);
    ++per_bin[d <= 3 ? 0 : d <= 8 ? 1 : 2];
  }
  // Weights 1:2:1 of 100 -> 25/50/25 (+- the remainder hand-out).
  EXPECT_NEAR(per_bin[0], 25, 1);
  EXPECT_NEAR(per_bin[1], 50, 1);
  EXPECT_NEAR(per_bin[2], 25, 1);
}

TEST(Sampler, AllPairsCountMatchesDirectCounting) {
  DatasetMetadata m = synthetic_metadata(3, 90);
  for (int64_t cap : {0, 1, 2}) {
    DataConfig cfg;
    cfg.max_pairs_per_problem = cap;
    cfg.n_samples = 0;  // every available pair; no bins: every problem
    int64_t expected = 0;
    for (int64_t p = 0; p < m.problems.size(); ++p) {
      int64_t n = std::min(m.problems.n_correct(p), m.problems.n_incorrect(p));
      expected += cap ? std::min(n, cap) : n;
    }
    EXPECT_EQ(Sampler(m, cfg, Split::Train).size(), expected) << "cap " << cap;
  }
  DataConfig too_many;
  too_many.n_samples = 100000;
  try {
    Sampler(m, too_many, Split::Train);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("n_samples = 100000"), std::string::npos) << e.what();
  }
}

TEST(Sampler, PointwiseKeepsTheCorrectSideOfTheSamePairs) {
  DatasetMetadata m = synthetic_metadata(4, 60);
  DataConfig pw = binned_config(11, 40);
  DataConfig pt = pw;
  pt.pairwise = false;
  Sampler a(m, pw, Split::Train), b(m, pt, Split::Train);
  ASSERT_EQ(a.size(), b.size());
  for (int64_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a.items()[i].pos, b.items()[i].pos);
    EXPECT_EQ(b.items()[i].neg, -1);
  }
  EXPECT_FALSE(b.pairwise());
}

TEST(Sampler, LengthBalancedPairsShareALengthBinAndAreStable) {
  DatasetMetadata m = synthetic_metadata(5, 150);
  DataConfig cfg;
  cfg.sampling = Sampling::LengthBalanced;
  cfg.pairwise = true;
  cfg.difficulty_bins = {0, 12};
  cfg.max_pairs_per_problem = 2;
  cfg.length_bins = {0, 100, 200, 400};
  Sampler a(m, cfg, Split::Train), b(m, cfg, Split::Train);
  ASSERT_GT(a.size(), 10);
  EXPECT_EQ(a.items(), b.items());
  auto bin = [&](int64_t row) {
    const int32_t len = m.samples.solution_length(row);
    return std::upper_bound(cfg.length_bins.begin(), cfg.length_bins.end(), len) - cfg.length_bins.begin();
  };
  std::map<int32_t, int> per_problem;
  for (const DataItem& it : a.items()) {
    EXPECT_EQ(bin(it.pos), bin(it.neg));
    EXPECT_LE(++per_problem[it.problem], 2);
  }
}

// The same selection as an independent Python implementation of weighted_mtp's, using CPython's random.
TEST(Sampler, MatchesPythonReferenceImplementation) {
  // A comparison that cannot run must fail, not skip: scripts/setup.sh installs python3.
  auto probe = test::run_command("python3 -c 'import json, random'");
  ASSERT_EQ(probe.exit_code, 0) << "python3 (with json, random) is required for this test: " << probe.output;
  const std::string dir = test::scratch_dir("sampler_python");
  DatasetMetadata m = synthetic_metadata(6, 200);
  json::Value problems = json::Value::array();
  for (int64_t p = 0; p < m.problems.size(); ++p) {
    json::Value o = json::Value::object();
    auto ints = [](const std::vector<int64_t>& v) {
      json::Value a = json::Value::array();
      for (int64_t x : v) a.push(x);
      return a;
    };
    json::Value cl = json::Value::array(), il = json::Value::array();
    for (int64_t k = m.problems.correct_offsets[p]; k < m.problems.correct_offsets[p + 1]; ++k)
      cl.push(static_cast<int64_t>(m.problems.correct_lengths[k]));
    for (int64_t k = m.problems.incorrect_offsets[p]; k < m.problems.incorrect_offsets[p + 1]; ++k)
      il.push(static_cast<int64_t>(m.problems.incorrect_lengths[k]));
    const int32_t d = m.problems.difficulty[p];
    o.set("id", m.problems.ids[p]).set("difficulty", d == kNoDifficulty ? json::Value() : json::Value(d));
    o.set("correct", ints(m.problems.correct_of(p))).set("incorrect", ints(m.problems.incorrect_of(p)));
    o.set("correct_lengths", std::move(cl)).set("incorrect_lengths", std::move(il));
    problems.push(std::move(o));
  }
  struct Case {
    std::string mode;
    int64_t seed, n, cap;
  };
  for (const Case& c : {Case{"difficulty", 42, 150, 3}, Case{"difficulty", 2024, 77, 0},
                        Case{"length_balanced", 84, 60, 2}, Case{"length_balanced", 5, 40, 0}}) {
    DataConfig cfg;
    cfg.sampling = c.mode == "length_balanced" ? Sampling::LengthBalanced : Sampling::Difficulty;
    cfg.pairwise = true;
    cfg.seed = c.seed;
    cfg.n_samples = c.n;
    cfg.max_pairs_per_problem = c.cap;
    cfg.difficulty_bins = {-1, 2, 3, 6, 7, 12};
    cfg.difficulty_weights = {0.5, 0.3, 0.2};
    cfg.length_bins = {0, 100, 150, 200, 300, 500};
    json::Value spec = json::Value::object();
    json::Value bins = json::Value::array(), weights = json::Value::array(), lb = json::Value::array();
    for (size_t b = 0; b < cfg.difficulty_bins.size(); b += 2)
      bins.push(json::Value::array().push(cfg.difficulty_bins[b]).push(cfg.difficulty_bins[b + 1]));
    for (double w : cfg.difficulty_weights) weights.push(w);
    for (int64_t e : cfg.length_bins) lb.push(e);
    spec.set("problems", problems).set("mode", c.mode).set("bins", std::move(bins)).set("weights", std::move(weights));
    spec.set("length_bins", std::move(lb)).set("n_samples", c.n).set("max_pairs", c.cap).set("seed", c.seed);
    std::ofstream(dir + "/in.json") << json::dump(spec);
    auto r = test::run_command("python3 " + test::source_path("tests/data/reference_sampler.py") + " " + dir +
                               "/in.json " + dir + "/out.json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(dir + "/out.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    json::Value expected = json::parse(text);
    Sampler s(m, cfg, Split::Train);
    ASSERT_EQ(static_cast<size_t>(s.size()), expected.as_array().size()) << c.mode << " seed " << c.seed;
    for (int64_t i = 0; i < s.size(); ++i) {
      const auto& e = expected.as_array()[i].as_array();
      ASSERT_EQ(s.items()[i].pos, e[0].as_int()) << c.mode << " seed " << c.seed << " item " << i;
      ASSERT_EQ(s.items()[i].neg, e[1].as_int()) << c.mode << " seed " << c.seed << " item " << i;
      ASSERT_EQ(s.items()[i].problem, e[2].as_int());
    }
  }
}

// Every world size sees the same global blocks; rank shares are disjoint, cover the block, and give
// every rank the same number of micro-batches; over an epoch a rank gets items[rank::world].
TEST(Sampler, StepsAreWorldSizeIndependent) {
  DatasetMetadata m = synthetic_metadata(8, 200);
  DataConfig cfg;
  cfg.seed = 3;
  Sampler s(m, cfg, Split::Train);
  const int64_t G = 24, micro = 2;
  const int64_t spe = s.steps_per_epoch(G);
  ASSERT_GE(spe, 3);
  const int64_t steps = 2 * spe + 1;             // crosses two epoch boundaries
  std::vector<std::vector<DataItem>> reference;  // world 1
  for (int world = 1; world <= 4; ++world) {
    std::vector<GlobalBatchIterator> its;
    for (int r = 0; r < world; ++r) its.emplace_back(s, BatchGeometry{G, micro, world, r});
    std::vector<std::vector<DataItem>> epoch_share(world);
    for (int64_t step = 0; step < steps; ++step) {
      std::multiset<int64_t> covered;
      std::vector<DataItem> global;
      for (int r = 0; r < world; ++r) {
        GlobalBatchItems st = its[r].next();
        if (r == 0) global = st.global;
        ASSERT_EQ(st.global, global) << "ranks disagree on the global block";
        ASSERT_EQ(static_cast<int64_t>(st.micro_batches.size()), G / (micro * world));
        for (const auto& mb : st.micro_batches) {
          ASSERT_EQ(static_cast<int64_t>(mb.size()), micro);
          for (const DataItem& it : mb) {
            covered.insert(it.pos);
            if (st.start.epoch == 0) epoch_share[r].push_back(it);
          }
        }
      }
      std::multiset<int64_t> block;
      for (const DataItem& it : global) block.insert(it.pos);
      ASSERT_EQ(covered, block) << "rank shares do not partition step " << step << " at world " << world;
      ASSERT_EQ(global, s.global_step_items(step, G));
      if (world == 1) reference.push_back(global);
      ASSERT_EQ(global, reference[step]) << "world " << world << " step " << step;
    }
    // Epoch 0: rank r got items[r::world] of the trimmed epoch order.
    std::vector<DataItem> order = s.epoch_order(0);
    order.resize(static_cast<size_t>(spe * G));
    for (int r = 0; r < world; ++r) {
      std::vector<DataItem> strided;
      for (size_t i = static_cast<size_t>(r); i < order.size(); i += static_cast<size_t>(world))
        strided.push_back(order[i]);
      ASSERT_EQ(epoch_share[r], strided) << "world " << world << " rank " << r;
    }
  }
}

TEST(Sampler, CursorSavesAndRestoresExactly) {
  DatasetMetadata m = synthetic_metadata(9, 150);
  DataConfig cfg = binned_config(5, 0);
  Sampler s(m, cfg, Split::Train);
  const BatchGeometry g{12, 3, 2, 1};
  GlobalBatchIterator full(s, g);
  std::vector<GlobalBatchItems> all;
  for (int i = 0; i < 25; ++i) all.push_back(full.next());
  for (int cut : {0, 1, 5, static_cast<int>(s.steps_per_epoch(12)), 17}) {
    GlobalBatchIterator first(s, g);
    for (int i = 0; i < cut; ++i) first.next();
    const DataCursor saved = first.cursor();
    EXPECT_EQ(saved, s.cursor_of_step(cut, 12));
    Sampler again(m, cfg, Split::Train);  // a new process rebuilds the sampler from the same inputs
    ASSERT_EQ(again.fingerprint(), s.fingerprint());
    GlobalBatchIterator resumed(again, g, saved);
    for (int i = cut; i < 25; ++i) {
      GlobalBatchItems st = resumed.next();
      ASSERT_EQ(st.start, all[i].start) << "cut " << cut << " step " << i;
      ASSERT_EQ(st.global, all[i].global);
      ASSERT_EQ(st.micro_batches, all[i].micro_batches);
    }
    // Resuming on another world size continues with the same global batches.
    GlobalBatchIterator other(again, BatchGeometry{12, 2, 3, 2}, saved);
    for (int i = cut; i < 25; ++i) ASSERT_EQ(other.next().global, all[i].global);
  }
  EXPECT_THROW(GlobalBatchIterator(s, g, DataCursor{0, s.size() + 1}), Error);
}

TEST(Sampler, EpochOrderIsAPermutation) {
  DatasetMetadata m = synthetic_metadata(10, 100);
  Sampler s(m, DataConfig{}, Split::Train);
  for (int64_t e : {0, 1, 7}) {
    std::vector<DataItem> o = s.epoch_order(e);
    auto key = [](const DataItem& a, const DataItem& b) { return a.pos < b.pos; };
    std::vector<DataItem> x = s.items();
    std::sort(o.begin(), o.end(), key);
    std::sort(x.begin(), x.end(), key);
    EXPECT_EQ(o, x);
  }
}

TEST(Sampler, GeometryAndEvalBatches) {
  EXPECT_EQ((BatchGeometry{24, 2, 3, 0}).accumulation_steps(), 4);
  EXPECT_THROW((BatchGeometry{24, 5, 1, 0}).accumulation_steps(), Error);
  EXPECT_THROW((BatchGeometry{24, 2, 3, 3}).accumulation_steps(), Error);
  DatasetMetadata m = synthetic_metadata(11, 60);
  DataConfig cfg;
  cfg.val_n_samples = 0;
  Sampler s(m, cfg, Split::Valid);
  for (int world = 1; world <= 4; ++world) {
    std::multiset<int64_t> seen;
    size_t count = 0;
    for (int r = 0; r < world; ++r) {
      auto b = eval_micro_batches(s.items(), world, r, 4);
      if (r == 0) count = b.size();
      EXPECT_EQ(b.size(), count) << "every rank runs the same number of eval batches";
      for (const auto& mb : b) {
        EXPECT_LE(mb.size(), 4u);
        for (const auto& it : mb) seen.insert(it.pos);
      }
    }
    std::multiset<int64_t> all;
    for (const auto& it : s.items()) all.insert(it.pos);
    EXPECT_EQ(seen, all);
  }
  EXPECT_THROW(s.steps_per_epoch(s.size() + 1), Error);
}

TEST(DataConfig, ValidatesKeys) {
  DataConfig ok;
  ok.validate();
  auto bad = [](auto mutate) {
    DataConfig c;
    mutate(c);
    try {
      c.validate();
    } catch (const Error& e) {
      return e.kind() == ErrorKind::Usage;
    }
    return false;
  };
  EXPECT_TRUE(bad([](DataConfig& c) { c.difficulty_bins = {1, 2, 3}; }));
  EXPECT_TRUE(bad([](DataConfig& c) { c.difficulty_bins = {5, 1}; }));
  EXPECT_TRUE(bad([](DataConfig& c) { c.difficulty_weights = {1, 2}; }));
  EXPECT_TRUE(bad([](DataConfig& c) { c.difficulty_weights = {0}; }));
  EXPECT_TRUE(bad([](DataConfig& c) { c.length_bins = {0, 100, 100}; }));
  EXPECT_TRUE(bad([](DataConfig& c) { c.max_length = 0; }));
  EXPECT_TRUE(bad([](DataConfig& c) { c.n_samples = -1; }));
}

}  // namespace
}  // namespace wmtp
