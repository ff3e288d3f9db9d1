// A small blocking HTTP client over libcurl for JSON APIs: one request at a time, a timeout on
// each, a cancel flag polled while waiting (so a background thread can be stopped promptly), and
// MLflow's authentication variables (MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME/PASSWORD,
// MLFLOW_TRACKING_INSECURE_TLS) read from the environment. An answer is read up to
// kMaxResponseBytes: MLflow's answers are small (a 25000-point history page is ~2 MB), and a server
// (or something else on that port) that streams more would otherwise grow the trainer's memory
// without bound; past the cap the connection is dropped and the response says so (too_large).
#pragma once
#include <atomic>
#include <cstddef>
#include <string>

namespace wmtp {

constexpr size_t kMaxResponseBytes = size_t(16) << 20;

struct HttpResponse {
  long status = 0;  // 0: no answer (see error)
  std::string body;
  std::string error;       // libcurl's message when status == 0
  bool too_large = false;  // the answer passed kMaxResponseBytes: status 0, connection dropped
};

class HttpClient {
 public:
  explicit HttpClient(double timeout_sec);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Never throws for network trouble: a failed transfer is status 0 with `error` set.
  HttpResponse get(const std::string& url, const std::atomic<bool>* cancel);
  HttpResponse post_json(const std::string& url, const std::string& json, const std::atomic<bool>* cancel);

  // Percent-encodes a query-string value (RFC 3986 unreserved characters kept).
  static std::string escape(const std::string& s);

 private:
  HttpResponse perform(const std::string& url, const std::string* post_body, const std::atomic<bool>* cancel);
  void* curl_ = nullptr;  // CURL*
  double timeout_sec_;
};

}  // namespace wmtp
