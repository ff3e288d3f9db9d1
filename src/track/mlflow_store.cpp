// Tracking URIs and the choice of store.
#include "track/mlflow_store.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "core/error.h"
#include "track/mlflow_file_store.h"
#include "track/mlflow_rest_store.h"

namespace wmtp {

namespace {

// [begin, end) of the userinfo of scheme://userinfo@host/..., or npos when there is none.
std::pair<size_t, size_t> userinfo_range(const std::string& uri) {
  const size_t scheme = uri.find("://");
  if (scheme == std::string::npos) return {std::string::npos, 0};
  const size_t begin = scheme + 3;
  const size_t auth_end = std::min(uri.find_first_of("/?#", begin), uri.size());
  const size_t at = uri.rfind('@', auth_end == 0 ? 0 : auth_end - 1);
  if (at == std::string::npos || at < begin) return {std::string::npos, 0};
  return {begin, at};
}

}  // namespace

std::string redact_uri(const std::string& uri) {
  const auto [begin, end] = userinfo_range(uri);
  if (begin == std::string::npos) return uri;
  return uri.substr(0, begin) + "***" + uri.substr(end);
}

MlflowUri parse_mlflow_uri(const std::string& uri) {
  MlflowUri u;
  if (userinfo_range(uri).first != std::string::npos) {
    u.problem =
        "credentials in the URI are refused (they would be printed and stored with the config): give "
        "them as MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN, in "
        "the environment";
    return u;
  }
  auto starts = [&](const char* p) { return uri.rfind(p, 0) == 0; };
  if (starts("http://") || starts("https://")) {
    const size_t host = uri.find("://") + 3;
    std::string rest = uri.substr(host);
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    if (rest.empty() || rest[0] == '/') {
      u.problem = "no host after the scheme (expected http(s)://host:port)";
      return u;
    }
    u.kind = MlflowUri::Kind::Http;
    u.location = uri.substr(0, host) + rest;
    return u;
  }
  std::string path = uri;
  if (starts("file://")) {
    path = uri.substr(7);
    if (!path.empty() && path[0] != '/') {
      u.problem = "file://HOST/... is not supported (expected file:///absolute/path)";
      return u;
    }
  } else if (starts("file:")) {
    path = uri.substr(5);
  } else if (uri.find("://") != std::string::npos || uri.rfind("databricks", 0) == 0) {
    u.problem = "unsupported scheme (expected file:///path, a directory, or http(s)://host:port)";
    return u;
  }
  if (path.empty()) {
    u.problem = "no directory given";
    return u;
  }
  u.kind = MlflowUri::Kind::File;
  u.location = std::filesystem::absolute(path).lexically_normal().string();
  while (u.location.size() > 1 && u.location.back() == '/') u.location.pop_back();
  return u;
}

const char* mlflow_status_name(MlflowRunStatus s) {
  switch (s) {
    case MlflowRunStatus::Running: return "RUNNING";
    case MlflowRunStatus::Finished: return "FINISHED";
    case MlflowRunStatus::Failed: return "FAILED";
    case MlflowRunStatus::Killed: return "KILLED";
  }
  return "RUNNING";
}

MlflowRunStatus mlflow_status_from_name(const std::string& name) {
  for (MlflowRunStatus s : {MlflowRunStatus::Finished, MlflowRunStatus::Failed, MlflowRunStatus::Killed})
    if (name == mlflow_status_name(s)) return s;
  return MlflowRunStatus::Running;
}

std::unique_ptr<MlflowStore> open_mlflow_store(const std::string& uri, double timeout_sec) {
  const MlflowUri u = parse_mlflow_uri(uri);
  switch (u.kind) {
    case MlflowUri::Kind::File: return std::make_unique<MlflowFileStore>(u.location);
    case MlflowUri::Kind::Http: return std::make_unique<MlflowRestStore>(u.location, timeout_sec);
    case MlflowUri::Kind::Invalid: break;
  }
  throw_usage("MLflow tracking URI '", redact_uri(uri), "': ", u.problem);
}

}  // namespace wmtp
