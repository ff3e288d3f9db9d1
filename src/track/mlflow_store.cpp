// Tracking URIs and the choice of store.
#include "track/mlflow_store.h"

#include <filesystem>

#include "core/error.h"
#include "track/mlflow_file_store.h"
#include "track/mlflow_rest_store.h"

namespace wmtp {

MlflowUri parse_mlflow_uri(const std::string& uri) {
  MlflowUri u;
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

std::unique_ptr<MlflowStore> open_mlflow_store(const std::string& uri, double timeout_sec) {
  const MlflowUri u = parse_mlflow_uri(uri);
  switch (u.kind) {
    case MlflowUri::Kind::File: return std::make_unique<MlflowFileStore>(u.location);
    case MlflowUri::Kind::Http: return std::make_unique<MlflowRestStore>(u.location, timeout_sec);
    case MlflowUri::Kind::Invalid: break;
  }
  throw_usage("MLflow tracking URI '", uri, "': ", u.problem);
}

}  // namespace wmtp
