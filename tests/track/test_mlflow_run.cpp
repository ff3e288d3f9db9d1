// MlflowRunLink over the file store: a resumed run continues the recorded MLflow run and sends only
// steps above those it holds; a fresh start makes a new run; a changed param is kept as a tag (params
// cannot change); track-sync fills gaps; a batch that failed after a partial write is
// resent without duplicates. The file store's layout itself is read back by an independent reader in
// test_track_e2e.sh (PyYAML, as MLflow reads it).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "test_util.h"
#include "track/mlflow_file_store.h"
#include "track/mlflow_run.h"

namespace wmtp {
namespace {

std::vector<MlflowMetric> steps(std::initializer_list<int64_t> ss, const std::string& key = "train/loss") {
  std::vector<MlflowMetric> v;
  for (int64_t s : ss) v.push_back({key, 0.5 * double(s), 1000 * s, s});
  return v;
}

RunRecord info(const std::string& dir, int64_t start_step, const std::string& lr = "0.01") {
  std::filesystem::create_directories(dir + "/run");  // the trainer's run directory exists
  return {dir + "/run",
          "train-baseline",
          2,
          start_step,
          "[optimizer]\nlr = " + lr + "\n[training]\nseed = 42\n",
          dir + "/run/metrics.jsonl"};
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(MlflowRunLink, ResumeContinuesTheRecordedRunAboveItsHighestStep) {
  const std::string dir = test::scratch_dir("mlflow_link_resume");
  MlflowFileStore store(dir + "/mlruns");
  std::string first;
  {
    MlflowRunLink link(store, info(dir, 0), "exp", MlflowRunLink::Use::Training);
    EXPECT_EQ(link.log(steps({1, 2, 3, 4, 5})), 5u);
    link.close(MlflowRunStatus::Killed);
    first = link.run_id();
    EXPECT_FALSE(link.continued());
  }
  EXPECT_EQ(read_mlflow_record(dir + "/run", store.describe()).run_id, first);
  MlflowRunLink again(store, info(dir, 3, "0.02"), "exp", MlflowRunLink::Use::Training);
  EXPECT_EQ(again.log(steps({4, 5, 6, 7})), 2u);  // 4 and 5 are held already
  EXPECT_EQ(again.run_id(), first);
  EXPECT_TRUE(again.continued());
  EXPECT_EQ(store.metric_steps(first, "train/loss"), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
  const auto params = store.run_params(first);
  ASSERT_TRUE(params.has_value());
  EXPECT_NE(std::find(params->begin(), params->end(), std::make_pair(std::string("optimizer.lr"), std::string("0.01"))),
            params->end());  // the first value stays
  const std::string tag = read(std::filesystem::path(dir) / "mlruns" /
                               read_mlflow_record(dir + "/run", store.describe()).experiment_id / first / "tags" /
                               "wmtp.changed_param.optimizer.lr");
  EXPECT_EQ(tag, "0.02 (from step 3)");
}

TEST(MlflowRunLink, FreshStartMakesANewRun) {
  const std::string dir = test::scratch_dir("mlflow_link_fresh");
  MlflowFileStore store(dir + "/mlruns");
  MlflowRunLink a(store, info(dir, 0), "exp", MlflowRunLink::Use::Training);
  a.log(steps({1, 2}));
  MlflowRunLink b(store, info(dir, 0), "exp", MlflowRunLink::Use::Training);
  EXPECT_EQ(b.log(steps({1, 2})), 2u);
  EXPECT_NE(a.run_id(), b.run_id());
  EXPECT_EQ(read_mlflow_record(dir + "/run", store.describe()).run_id, b.run_id());
}

TEST(MlflowRunLink, EveryStepFillsGapsOnly) {
  const std::string dir = test::scratch_dir("mlflow_link_gaps");
  MlflowFileStore store(dir + "/mlruns");
  std::string id;
  {
    MlflowRunLink live(store, info(dir, 0), "exp", MlflowRunLink::Use::Training);
    live.log(steps({1, 2, 4}));
    id = live.run_id();
  }
  MlflowRunLink sync(store, info(dir, 0), "exp", MlflowRunLink::Use::Sync);
  EXPECT_EQ(sync.log(steps({1, 2, 3, 4, 5})), 2u);
  EXPECT_EQ(sync.log(steps({1, 2, 3, 4, 5})), 0u);  // twice: nothing more
  std::vector<int64_t> held = store.metric_steps(id, "train/loss");
  std::sort(held.begin(), held.end());
  EXPECT_EQ(held, (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

// Writes the first half of the first metrics batch, then fails as a server may (transient).
struct PartialStore : MlflowFileStore {
  using MlflowFileStore::MlflowFileStore;
  bool failed = false;
  void log_batch(const std::string& run, const std::vector<MlflowMetric>& m, const MlflowPairs& p,
                 const MlflowPairs& t) override {
    if (!failed && !m.empty()) {
      failed = true;
      MlflowFileStore::log_batch(run, std::vector<MlflowMetric>(m.begin(), m.begin() + long(m.size() / 2)), p, t);
      throw MlflowError("503 after a partial write", true);
    }
    MlflowFileStore::log_batch(run, m, p, t);
  }
};

TEST(MlflowRunLink, RetryAfterAPartialWriteSendsOnlyTheRest) {
  const std::string dir = test::scratch_dir("mlflow_link_partial");
  PartialStore store(dir + "/mlruns");
  MlflowRunLink link(store, info(dir, 0), "exp", MlflowRunLink::Use::Training);
  EXPECT_THROW(link.log(steps({1, 2, 3, 4, 5, 6})), MlflowError);
  EXPECT_EQ(link.log(steps({1, 2, 3, 4, 5, 6})), 3u);
  EXPECT_EQ(store.metric_steps(link.run_id(), "train/loss"), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

// Fails open()'s log_batch (tags and params, no metrics) once, before writing anything (as HTTP 429 does).
struct FailFirstParamsStore : MlflowFileStore {
  using MlflowFileStore::MlflowFileStore;
  bool failed = false;
  void log_batch(const std::string& run, const std::vector<MlflowMetric>& m, const MlflowPairs& p,
                 const MlflowPairs& t) override {
    if (!failed && m.empty()) {
      failed = true;
      throw MlflowError("429", true, "REQUEST_LIMIT_EXCEEDED");
    }
    MlflowFileStore::log_batch(run, m, p, t);
  }
};

TEST(MlflowRunLink, ResumedOpenFailingHalfwayKeepsItsParamDiff) {
  const std::string dir = test::scratch_dir("mlflow_link_reopen");
  std::string id;
  {
    MlflowFileStore store(dir + "/mlruns");
    MlflowRunLink first(store, info(dir, 0), "exp", MlflowRunLink::Use::Training);
    first.log(steps({1, 2}));
    id = first.run_id();
  }
  FailFirstParamsStore store(dir + "/mlruns");
  MlflowRunLink again(store, info(dir, 2, "0.5"), "exp", MlflowRunLink::Use::Training);
  EXPECT_THROW(again.log(steps({3})), MlflowError);
  EXPECT_EQ(again.log(steps({3})), 1u);  // not "param optimizer.lr cannot change"
  EXPECT_EQ(again.run_id(), id);
  EXPECT_EQ(store.metric_steps(id, "train/loss"), (std::vector<int64_t>{1, 2, 3}));
}

TEST(MlflowUri, Forms) {
  auto kind = [](const char* u) { return parse_mlflow_uri(u).kind; };
  EXPECT_EQ(parse_mlflow_uri("file:///data/mlruns/").location, "/data/mlruns");
  EXPECT_EQ(parse_mlflow_uri("/data//mlruns").location, "/data/mlruns");
  EXPECT_EQ(parse_mlflow_uri("mlruns").location, (std::filesystem::current_path() / "mlruns").string());
  EXPECT_EQ(parse_mlflow_uri("file:mlruns").location, (std::filesystem::current_path() / "mlruns").string());
  EXPECT_EQ(parse_mlflow_uri("http://host:5000/").location, "http://host:5000");
  EXPECT_EQ(parse_mlflow_uri("https://host/prefix/").location, "https://host/prefix");
  EXPECT_EQ(kind("http://host:5000"), MlflowUri::Kind::Http);
  EXPECT_EQ(kind("file:///x"), MlflowUri::Kind::File);
  for (const char* bad : {"http://", "https:///x", "file://server/x", "databricks", "s3://bucket/x", "file:"})
    EXPECT_EQ(kind(bad), MlflowUri::Kind::Invalid) << bad;
}

}  // namespace
}  // namespace wmtp
