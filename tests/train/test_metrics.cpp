// MetricsLog writes one parseable JSON object per line, appending across runs; the progress line
// carries the figures.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/json.h"
#include "test_util.h"
#include "train/metrics.h"

namespace wmtp {
namespace {

TEST(Metrics, JsonLinesAppendAndParse) {
  std::string dir = test::scratch_dir("metrics_jsonl");
  {
    MetricsLog log(dir, /*writer=*/true);
    MetricsRecord r;
    r.set("train/loss", 2.5).set("train/grad_norm", 0.125).set("perf/mfu_pct", NAN);
    log.write(1, r);
  }
  {
    MetricsLog log(dir, true);  // a resumed run appends
    MetricsRecord r;
    r.set("train/loss", 1.25);
    log.write(2, r);
  }
  MetricsLog not_writer(dir, false);
  not_writer.write(3, MetricsRecord().set("train/loss", 9.0));  // other ranks write nothing
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  std::vector<json::Value> rows;
  while (std::getline(in, line)) rows.push_back(json::parse(line));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("step").as_int(), 1);
  EXPECT_EQ(rows[0].at("train/loss").as_double(), 2.5);
  EXPECT_TRUE(rows[0].at("perf/mfu_pct").is_null());  // NaN is not JSON: written as null
  EXPECT_TRUE(rows[0].at("time").is_number());
  EXPECT_EQ(rows[1].at("train/loss").as_double(), 1.25);
}

TEST(Metrics, NothingIsCreatedBeforeTheFirstRecord) {
  // A run that fails during start-up (after the log exists, before a step) leaves no empty file.
  const std::string dir = test::scratch_dir("metrics_lazy") + "/run";
  {
    MetricsLog log(dir, /*writer=*/true);
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/metrics.jsonl"));
  MetricsLog log(dir, true);
  log.write(1, MetricsRecord().set("train/loss", 1.0));
  EXPECT_TRUE(std::filesystem::exists(dir + "/metrics.jsonl"));
}

TEST(Metrics, ProgressLineShowsTheFigures) {
  MetricsRecord r;
  r.set("train/loss", 2.3142).set("train/learning_rate", 1.2e-4).set("perf/tokens_per_sec", 5100);
  r.set("perf/mfu_pct", 31.2).set("perf/eta_sec", 192);
  std::string s = format_progress(12, 200, r);
  EXPECT_NE(s.find("step 12/200"), std::string::npos) << s;
  EXPECT_NE(s.find("loss 2.3142"), std::string::npos) << s;
  EXPECT_NE(s.find("5.1k tok/s"), std::string::npos) << s;
  EXPECT_NE(s.find("mfu 31.2%"), std::string::npos) << s;
  EXPECT_NE(s.find("eta 3m12s"), std::string::npos) << s;
}

TEST(Metrics, ProgressLineShowsTheGpuPeakNotTheHostRss) {
  MetricsRecord r;
  r.set("system/rss_max_gib", 1.58);
  EXPECT_NE(format_progress(1, 2, r).find("mem 1.58 GiB |"), std::string::npos) << format_progress(1, 2, r);
  r.set("system/gpu_mem_peak_allocated_gib", 23.56);
  const std::string s = format_progress(1, 2, r);
  EXPECT_NE(s.find("mem 23.56 GiB (GPU peak)"), std::string::npos) << s;
  EXPECT_EQ(s.find("1.58"), std::string::npos) << s;
}

}  // namespace
}  // namespace wmtp
