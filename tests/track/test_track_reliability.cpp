// What the tracking code does with hostile or damaged input:
//  - an HTTP answer past kMaxResponseBytes (declared by Content-Length, or streamed without one) is
//    cut off: the connection is dropped after at most a few MiB more than the cap (what the kernel's
//    socket buffers hold), the response says too_large, and the REST store refuses it as not MLflow;
//  - a corrupt <run_dir>/mlflow.json is named with the way out (move it aside);
//  - [logging] mlflow_timeout_sec is bounded, and a URI with credentials is refused without
//    printing them;
//  - the file store never counts a torn metric line as a point and drops it before appending;
//  - read_metrics_history skips torn records (anywhere: a resumed run continues after one) with a
//    warning naming file:line, and names file:line for anything else that is not a record.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "test_util.h"
#include "track/http_client.h"
#include "track/mlflow_file_store.h"
#include "track/mlflow_rest_store.h"
#include "track/mlflow_run.h"
#include "track/track_sync.h"
#include "track/tracking_config.h"

namespace wmtp {
namespace {

// A one-connection HTTP server that answers every request with a 200 whose body is `total` bytes
// of 'x' (with or without a Content-Length header), and counts what the client let it send.
class FloodServer {
 public:
  FloodServer(size_t total, bool content_length) : total_(total), content_length_(content_length) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 1);
    thread_ = std::thread([this] { serve(); });
  }
  ~FloodServer() {
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  size_t sent() {  // once the answer is over
    if (thread_.joinable()) thread_.join();
    return sent_;
  }

 private:
  void serve() {
    const int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) return;
    char req[4096];
    (void)!::recv(c, req, sizeof req, 0);
    std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n";
    head += content_length_ ? "Content-Length: " + std::to_string(total_) + "\r\n\r\n" : "Connection: close\r\n\r\n";
    (void)!::send(c, head.data(), head.size(), MSG_NOSIGNAL);
    const std::string chunk(1 << 16, 'x');
    while (sent_ < total_) {
      const ssize_t n = ::send(c, chunk.data(), std::min(chunk.size(), total_ - sent_), MSG_NOSIGNAL);
      if (n <= 0) break;  // the client dropped the connection
      sent_ += size_t(n);
    }
    ::close(c);
  }
  size_t total_;
  bool content_length_;
  int fd_ = -1, port_ = 0;
  size_t sent_ = 0;
  std::thread thread_;
};

constexpr size_t kFlood = size_t(256) << 20;  // 16 times the cap
constexpr size_t kSlack = size_t(32) << 20;   // socket buffers on both sides, generously

TEST(HttpClient, AStreamedAnswerIsCutAtTheCap) {
  FloodServer server(kFlood, /*content_length=*/false);
  HttpClient http(30.0);
  const HttpResponse r = http.get(server.url() + "/api/2.0/mlflow/runs/get", nullptr);
  EXPECT_TRUE(r.too_large);
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(r.body.empty());
  EXPECT_NE(r.error.find("larger than 16 MiB"), std::string::npos) << r.error;
  EXPECT_LT(server.sent(), kMaxResponseBytes + kSlack);  // the connection was dropped, not drained
}

TEST(HttpClient, ADeclaredHugeAnswerIsRefusedAndTheRestStoreCallsItNotMlflow) {
  FloodServer server(kFlood, /*content_length=*/true);
  MlflowRestStore store(server.url(), 30.0);
  try {
    store.run_params("0123");
    ADD_FAILURE() << "a 256 MiB answer was accepted";
  } catch (const MlflowError& e) {
    EXPECT_FALSE(e.transient()) << e.what();  // retrying would read the flood again
    EXPECT_NE(std::string(e.what()).find("not an MLflow server"), std::string::npos) << e.what();
  }
  EXPECT_LT(server.sent(), kMaxResponseBytes + kSlack);
}

TEST(MlflowRecord, ACorruptRecordFileIsNamedWithTheWayOut) {
  const std::string dir = test::scratch_dir("mlflow_record_corrupt");
  for (const std::string bad :
       {"{\"runs\": [{\"tracking_uri\": \"x\", \"run_id\": 12", "[1, 2]", "{\"runs\": [{\"tracking_uri\": \"x\"}]}"}) {
    std::ofstream(dir + "/mlflow.json") << bad;
    try {
      read_mlflow_record(dir, "x");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::Input);
      EXPECT_NE(m.find(dir + "/mlflow.json"), std::string::npos) << m;
      EXPECT_NE(m.find("move it aside"), std::string::npos) << m;
    }
    EXPECT_THROW(write_mlflow_record(dir, {"y", "1", "2"}), Error);  // never silently replaced
  }
}

TEST(TrackingConfig, TimeoutIsBoundedAndCredentialsInTheUriAreRefusedUnprinted) {
  TrackingConfig cfg;
  for (double t : {1e9, 301.0, 0.0, -1.0}) {
    cfg.mlflow_timeout_sec = t;
    try {
      cfg.validate();
      ADD_FAILURE() << "mlflow_timeout_sec = " << t << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Usage);
      EXPECT_NE(std::string(e.what()).find("[logging] mlflow_timeout_sec"), std::string::npos) << e.what();
    }
  }
  cfg.mlflow_timeout_sec = 300;
  EXPECT_NO_THROW(cfg.validate());
  for (const std::string uri :
       {"http://alice:S3cr3tPW@127.0.0.1:5000/", "https://alice:S3cr3tPW@host/prefix", "http://S3cr3tPW@host:5000"}) {
    cfg.mlflow_uri = uri;
    try {
      cfg.validate();
      ADD_FAILURE() << "accepted credentials in " << uri;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.find("S3cr3tPW"), std::string::npos) << m;
      EXPECT_NE(m.find("MLFLOW_TRACKING_USERNAME"), std::string::npos) << m;
      EXPECT_NE(m.find("MLFLOW_TRACKING_TOKEN"), std::string::npos) << m;
    }
    EXPECT_THROW(open_mlflow_store(uri, 1.0), Error);
  }
  cfg.mlflow_uri = "file:///tmp/a@b/mlruns";  // an '@' in a path is no userinfo
  EXPECT_NO_THROW(cfg.validate());
  EXPECT_EQ(redact_uri("http://u:p@h:1/x@y"), "http://***@h:1/x@y");
}

TEST(MlflowFileStore, ATornMetricLineIsNoPointAndIsDroppedBeforeTheNextAppend) {
  const std::string dir = test::scratch_dir("mlflow_store_torn");
  MlflowFileStore store(dir + "/mlruns");
  const std::string exp = store.get_or_create_experiment("e");
  const std::string run = store.create_run(exp, "r", 1000, {});
  store.log_batch(run, {{"loss", 0.5, 1000, 1}}, {{"p", "v"}}, {});
  const std::string file = dir + "/mlruns/" + exp + "/" + run + "/metrics/loss";
  std::ofstream(file, std::ios::app) << "2000 0.2";  // killed mid-line: value cut, no step
  EXPECT_EQ(store.metric_steps(run, "loss"), (std::vector<int64_t>{1}));
  store.log_batch(run, {{"loss", 0.25, 2000, 2}}, {}, {});
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "1000 0.5 1\n2000 0.25 2\n");
  // a param write a killed writer left as .tmp is no param
  std::ofstream(dir + "/mlruns/" + exp + "/" + run + "/params/q.tmp") << "";
  EXPECT_EQ(*store.run_params(run), (MlflowPairs{{"p", "v"}}));
  store.log_batch(run, {}, {{"p", "v"}}, {});  // the same value again: accepted
}

TEST(MetricsHistory, TornRecordsAreSkippedWithAWarningOtherDamageIsNamed) {
  const std::string dir = test::scratch_dir("metrics_history_torn");
  const std::string path = dir + "/metrics.jsonl";
  std::ofstream(path) << "{\"step\": 1, \"time\": 1.0, \"train/loss\": 2.0}\n"
                      << "{\"step\": 2, \"time\": 2.0, \"train/lo\n"  // torn, then a resume on a fresh line
                      << "{\"step\": 2, \"time\": 3.0, \"train/loss\": 1.5}\n"
                      << "{\"step\": 3, \"ti";  // torn last line
  std::vector<std::string> warnings;
  const std::vector<MetricsRow> rows = read_metrics_history(path, &warnings);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].step, 2);
  EXPECT_EQ(rows[1].values, (MetricValues{{"train/loss", 1.5}}));
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find(path + ":2: a torn record"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find(path + ":4: a torn record"), std::string::npos) << warnings[1];
  for (const std::string& bad : {std::string("\x89PNG\r\n\x1a\n\0\0\0", 11),
                                 std::string("{\"step\": \"x\", \"time\": 1}\n"), std::string("not json\n")}) {
    std::ofstream(path, std::ios::binary) << "{\"step\": 1, \"time\": 1.0}\n" << bad;
    try {
      read_metrics_history(path);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input);
      EXPECT_NE(std::string(e.what()).find(path + ":2"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace wmtp
