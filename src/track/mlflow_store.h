// The MLflow tracking operations wmtp uses, behind one interface with two stores: MLflow's file
// store (file:///path/mlruns, what `mlflow ui --backend-store-uri` reads) and a tracking server's
// REST API 2.0 (http(s)://host:port). Names and semantics follow MLflow's REST API documentation:
// metrics append (never overwrite), params are immutable (re-logging the same value is allowed),
// tags overwrite. Every call may throw MlflowError.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace wmtp {

struct MlflowUri {
  enum class Kind { Invalid, File, Http };
  Kind kind = Kind::Invalid;
  std::string location;  // File: an absolute directory; Http: the URL without a trailing '/'
  std::string problem;   // Invalid: why
};
// "file:///abs/dir", "file:relative/dir", a plain path (absolute or relative: made absolute here),
// "http://host:port[/prefix]", "https://...". Anything else is Invalid, and so is a URI with
// credentials (http://user:password@host/): a URI is printed, stored in config.toml, checkpoints,
// TensorBoard and MLflow params, so secrets come from MLFLOW_TRACKING_USERNAME/PASSWORD or
// MLFLOW_TRACKING_TOKEN instead (track/http_client.h).
MlflowUri parse_mlflow_uri(const std::string& uri);
// `uri` with the userinfo of its authority replaced by "***" (for messages about a refused URI).
std::string redact_uri(const std::string& uri);

struct MlflowMetric {
  std::string key;
  double value = 0;
  int64_t timestamp_ms = 0;
  int64_t step = 0;
};
using MlflowPairs = std::vector<std::pair<std::string, std::string>>;

enum class MlflowRunStatus { Running, Finished, Failed, Killed };
const char* mlflow_status_name(MlflowRunStatus s);                 // "RUNNING", ...
MlflowRunStatus mlflow_status_from_name(const std::string& name);  // unknown names: Running

class MlflowError : public std::runtime_error {
 public:
  // transient: worth retrying later (no connection, timeout, HTTP 429 or 5xx, a cancelled request);
  // otherwise the store refused the request itself (HTTP 4xx with error_code, an unwritable file).
  MlflowError(const std::string& what, bool transient, std::string code = "")
      : std::runtime_error(what), transient_(transient), code_(std::move(code)) {}
  bool transient() const { return transient_; }
  // The store certainly did not act on the request (HTTP 429: refused before any work).
  bool unprocessed() const { return code_ == "REQUEST_LIMIT_EXCEEDED" || http_status_ == 429; }
  void set_http_status(long s) { http_status_ = s; }
  const std::string& code() const { return code_; }  // MLflow's error_code, e.g. RESOURCE_DOES_NOT_EXIST

 private:
  bool transient_;
  std::string code_;
  long http_status_ = 0;
};

class MlflowStore {
 public:
  virtual ~MlflowStore() = default;
  virtual std::string describe() const = 0;  // the tracking URI

  // The id of the active experiment `name`, created when missing.
  virtual std::string get_or_create_experiment(const std::string& name) = 0;
  virtual std::string create_run(const std::string& experiment_id, const std::string& run_name, int64_t start_ms,
                                 const MlflowPairs& tags) = 0;
  // The run's params, or nullopt when the run does not exist or is deleted.
  virtual std::optional<MlflowPairs> run_params(const std::string& run_id) = 0;
  // Any number of metrics, params and tags (the REST store splits at the API's request limits);
  // within metrics, the order given is the order written.
  virtual void log_batch(const std::string& run_id, const std::vector<MlflowMetric>& metrics, const MlflowPairs& params,
                         const MlflowPairs& tags) = 0;
  virtual void update_run(const std::string& run_id, MlflowRunStatus status, int64_t end_ms) = 0;
  // The run's status (an existing run; MLflow's SCHEDULED counts as Running).
  virtual MlflowRunStatus run_status(const std::string& run_id) = 0;
  // The steps logged for `key`, in the order logged (duplicates kept); empty when none.
  virtual std::vector<int64_t> metric_steps(const std::string& run_id, const std::string& key) = 0;

  // Checked while a request waits on the network: once it is true, the request fails (transient).
  void set_cancel(const std::atomic<bool>* cancel) { cancel_ = cancel; }

 protected:
  const std::atomic<bool>* cancel_ = nullptr;
};

// Opens the store for a valid URI (Error(Usage) otherwise). `timeout_sec` bounds each HTTP request.
std::unique_ptr<MlflowStore> open_mlflow_store(const std::string& uri, double timeout_sec);

}  // namespace wmtp
