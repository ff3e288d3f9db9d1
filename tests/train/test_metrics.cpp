// MetricsLog writes one parseable JSON object per line, appending across runs; a write that fails
// (a file size limit stands in for a full disk: same partial write, then an error) throws naming the
// file and leaves it ending with its last complete record; a resume after a torn record starts on a
// fresh line; the progress line carries the figures.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
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

MetricsRecord wide_record(double v) {  // ~1.5 KB, as a real one
  MetricsRecord r;
  for (int i = 0; i < 40; ++i) r.set("train/loss_head_" + std::to_string(i), v + i);
  return r;
}

TEST(Metrics, AFailedWriteLeavesTheFileEndingWithItsLastCompleteRecord) {
  const std::string dir = test::scratch_dir("metrics_write_fails");
  const std::string path = dir + "/metrics.jsonl";
  MetricsLog log(dir, /*writer=*/true);
  log.write(1, wide_record(1.0));
  const std::string before = test::read_file(path);
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  rlimit lim = old;
  lim.rlim_cur = before.size() + 100;  // the next record fits in part only
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  std::string message;
  try {
    log.write(2, wide_record(2.0));
  } catch (const Error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find("cannot write '" + path + "'"), std::string::npos) << message;
  EXPECT_EQ(test::read_file(path), before);  // nothing of step 2
  log.write(3, wide_record(3.0));            // space again: the file goes on, every line a record
  std::ifstream in(path);
  std::string line;
  std::vector<int64_t> steps;
  while (std::getline(in, line)) steps.push_back(json::parse(line).at("step").as_int());
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 3}));
}

TEST(Metrics, AResumeAfterATornRecordStartsOnAFreshLine) {
  const std::string dir = test::scratch_dir("metrics_torn_resume");
  const std::string path = dir + "/metrics.jsonl";
  {
    MetricsLog log(dir, true);
    log.write(1, MetricsRecord().set("train/loss", 1.0));
  }
  std::ofstream(path, std::ios::app) << "{\"step\": 2, \"ti";  // killed mid-record
  {
    MetricsLog log(dir, true);  // the resumed run
    log.write(2, MetricsRecord().set("train/loss", 0.5));
  }
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u) << test::read_file(path);
  EXPECT_EQ(lines[1], "{\"step\": 2, \"ti");
  EXPECT_EQ(json::parse(lines[2]).at("train/loss").as_double(), 0.5);
  EXPECT_EQ(test::read_file(path).back(), '\n');
}

TEST(Metrics, NothingIsCreatedBeforeTheFirstRecord) {
  // A run that fails during start-up (after the log exists, before a step) leaves no empty file.
  const std::string dir = test::scratch_dir("metrics_lazy") + "/run";
  { MetricsLog log(dir, /*writer=*/true); }
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
