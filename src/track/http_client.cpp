// HttpClient over libcurl's easy interface (see http_client.h).
#include "track/http_client.h"

#include <curl/curl.h>

#include <cctype>
#include <cstdlib>
#include <mutex>

#include "core/error.h"

namespace wmtp {

namespace {

// Returning less than given aborts the transfer (CURLE_WRITE_ERROR) and closes the connection.
size_t append_body(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<HttpResponse*>(user);
  if (r->body.size() + size * n > kMaxResponseBytes) {
    r->too_large = true;
    return 0;
  }
  r->body.append(data, size * n);
  return size * n;
}

// Returning non-zero aborts the transfer (CURLE_ABORTED_BY_CALLBACK).
int check_cancel(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* cancel = static_cast<const std::atomic<bool>*>(user);
  return cancel && cancel->load() ? 1 : 0;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

HttpClient::HttpClient(double timeout_sec) : timeout_sec_(timeout_sec) {
  static std::once_flag once;  // curl_global_init is not thread-safe: first use is on the main thread
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
  if (!curl_) throw_runtime("libcurl: curl_easy_init failed");
}

HttpClient::~HttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

std::string HttpClient::escape(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += char(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

HttpResponse HttpClient::get(const std::string& url, const std::atomic<bool>* cancel) {
  return perform(url, nullptr, cancel);
}

HttpResponse HttpClient::post_json(const std::string& url, const std::string& json, const std::atomic<bool>* cancel) {
  return perform(url, &json, cancel);
}

HttpResponse HttpClient::perform(const std::string& url, const std::string* post_body,
                                 const std::atomic<bool>* cancel) {
  CURL* c = static_cast<CURL*>(curl_);
  curl_easy_reset(c);
  HttpResponse r;
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Accept: application/json");
  if (post_body) headers = curl_slist_append(headers, "Content-Type: application/json");
  const std::string token = env("MLFLOW_TRACKING_TOKEN");
  if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
  const std::string user = env("MLFLOW_TRACKING_USERNAME"), password = env("MLFLOW_TRACKING_PASSWORD");

  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for DNS timeouts: we run in a worker thread
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, long(timeout_sec_ * 1000));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, long(timeout_sec_ * 1000));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
  // A declared Content-Length past the cap is refused before any of the body is read.
  curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(kMaxResponseBytes));
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, check_cancel);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, const_cast<std::atomic<bool>*>(cancel));
  if (!user.empty()) {
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, long(CURLAUTH_BASIC));
    curl_easy_setopt(c, CURLOPT_USERNAME, user.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, password.c_str());
  }
  if (env("MLFLOW_TRACKING_INSECURE_TLS") == "true") {
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (post_body) {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, post_body->data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(post_body->size()));
  }
  const CURLcode rc = curl_easy_perform(c);
  if (rc == CURLE_OK) {
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  } else {
    r.status = 0;
    r.error = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    if (rc == CURLE_FILESIZE_EXCEEDED) r.too_large = true;
    if (r.too_large) {
      r.body.clear();
      r.error = "the answer is larger than " + std::to_string(kMaxResponseBytes >> 20) +
                " MiB (MLflow's are far smaller): connection dropped";
    }
  }
  curl_slist_free_all(headers);
  return r;
}

}  // namespace wmtp
