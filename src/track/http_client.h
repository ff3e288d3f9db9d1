// A small blocking HTTP client over libcurl for JSON APIs: one request at a time, a timeout on
// each, a cancel flag polled while waiting (so a background thread can be stopped promptly), and
// MLflow's authentication variables (MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME/PASSWORD,
// MLFLOW_TRACKING_INSECURE_TLS) read from the environment.
#pragma once
#include <atomic>
#include <string>

namespace wmtp {

struct HttpResponse {
  long status = 0;        // 0: no answer (see error)
  std::string body;
  std::string error;      // libcurl's message when status == 0
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
