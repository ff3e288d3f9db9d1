// MLflow's file store layout, written and read back (see mlflow_file_store.h). meta.yaml files are
// written the way MLflow's yaml.safe_dump writes them (sorted keys, block style); strings are
// always single-quoted so names such as "007" or "true" stay strings.
#include "track/mlflow_file_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "core/durable_file.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace wmtp {

namespace {

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  throw MlflowError("MLflow file store: " + what + " '" + path + "': " + std::strerror(errno), /*transient=*/true);
}

std::string yaml_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "''";
    else if (c == '\n' || c == '\r')
      out += ' ';  // single-quoted YAML would fold it anyway
    else
      out += c;
  }
  return out + "'";
}

// A flat "key: value" meta.yaml: values unquoted ('' -> '), "null" kept as text.
std::map<std::string, std::string> read_meta(const std::string& path) {
  std::map<std::string, std::string> m;
  std::ifstream in(path);
  if (!in) return m;
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(": ");
    if (line.empty() || line[0] == ' ' || line[0] == '-' || colon == std::string::npos) {
      if (!line.empty() && line.back() == ':') m[line.substr(0, line.size() - 1)] = "";
      continue;
    }
    std::string v = line.substr(colon + 2);
    if (v.size() >= 2 && v.front() == '\'' && v.back() == '\'') {
      std::string u;
      for (size_t i = 1; i + 1 < v.size(); ++i) {
        u += v[i];
        if (v[i] == '\'' && v[i + 1] == '\'') ++i;
      }
      v = u;
    } else if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
      v = v.substr(1, v.size() - 2);  // MLflow never writes escapes in the fields wmtp reads
    }
    m[line.substr(0, colon)] = v;
  }
  return m;
}

void write_whole(const fs::path& p, const std::string& text);

// `fields` holds YAML-ready values (quoted or literal); written sorted, as yaml.safe_dump does.
void write_meta(const std::string& path, const std::map<std::string, std::string>& fields) {
  std::string text;
  for (const auto& [k, v] : fields) text += k + ": " + v + "\n";
  write_whole(path, text);
}

void make_dirs(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec) {
    errno = ec.value();
    io_error("cannot create directory", p.string());
  }
}

// Every file of the store is written whole or not at all, durably, so that a full disk never
// leaves an empty param (which a retry would read back as another value) or a torn metric line
// (which the next append would run into): params, tags and meta.yaml by an atomic rename of a
// fsync'ed temporary, metrics by an append that is undone when it fails.
void write_whole(const fs::path& p, const std::string& text) {
  make_dirs(p.parent_path());
  try {
    write_file_atomically(p.string(), text);
  } catch (const Error& e) {
    throw MlflowError(std::string("MLflow file store: ") + e.what(), /*transient=*/true);
  }
}

void append_lines(const fs::path& p, const std::string& lines) {
  make_dirs(p.parent_path());
  const bool existed = fs::exists(p);
  try {
    AppendFile f(p.string());
    if (f.ends_mid_line()) f.drop_torn_line();  // a writer killed mid-line: the point is sent again
    f.append(lines, /*sync=*/true);
  } catch (const Error& e) {
    std::error_code ec;
    if (!existed) fs::remove(p, ec);  // MLflow's reader refuses an empty metric file ("no data found")
    throw MlflowError(std::string("MLflow file store: ") + e.what(), /*transient=*/true);
  }
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// MLflow's rule for metric/param/tag names that become paths: [/\w.\- ]*, relative, no "..".
void check_key(const std::string& key) {
  bool ok = !key.empty() && key.front() != '/' && key.find("..") == std::string::npos &&
            key.find("//") == std::string::npos;
  for (char c : key)
    ok = ok &&
         (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '/' || c == '.' || c == '-' || c == ' ');
  if (!ok) throw MlflowError("MLflow: invalid key '" + key + "'", /*transient=*/false, "INVALID_PARAMETER_VALUE");
}

std::string random_digits_id() {  // 18 digits, no leading zero (MLflow's _generate_unique_integer_id)
  std::random_device rd;
  std::string s(1, char('1' + rd() % 9));
  while (s.size() < 18) s += char('0' + rd() % 10);
  return s;
}

std::string random_hex_id() {  // uuid4().hex: 32 lowercase hex digits
  std::random_device rd;
  std::string s;
  for (int i = 0; i < 32; ++i) s += "0123456789abcdef"[rd() % 16];
  return s;
}

// Python's repr(float): the shortest text that reads back to the same double.
std::string double_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

const char* status_code(MlflowRunStatus s) {  // RunStatus enum of MLflow's service.proto
  switch (s) {
    case MlflowRunStatus::Running: return "1";
    case MlflowRunStatus::Finished: return "3";
    case MlflowRunStatus::Failed: return "4";
    case MlflowRunStatus::Killed: return "5";
  }
  return "1";
}

std::string user_name() {
  const char* u = std::getenv("USER");
  return u ? u : "";
}

// Removes a directory made for an experiment or run whose meta.yaml could not be written (a full
// disk): MLflow's readers complain about such directories, and the retry makes a new one anyway.
void remove_partial(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace

MlflowFileStore::MlflowFileStore(std::string root) : root_(std::move(root)) {}

void MlflowFileStore::ensure_root() {
  // A new root, or one whose first try ended after making 0/ (a full disk).
  if (!fs::exists(fs::path(root_) / "0" / "meta.yaml") && (!fs::exists(root_) || fs::exists(fs::path(root_) / "0"))) {
    make_dirs(fs::path(root_) / "0");
    const std::string now = std::to_string(int64_t(std::time(nullptr)) * 1000);
    write_meta((fs::path(root_) / "0" / "meta.yaml").string(),
               {{"artifact_location", yaml_quote("file://" + root_ + "/0")},
                {"creation_time", now},
                {"experiment_id", yaml_quote("0")},
                {"last_update_time", now},
                {"lifecycle_stage", "active"},
                {"name", "Default"}});
  }
  make_dirs(fs::path(root_) / ".trash");
}

std::string MlflowFileStore::get_or_create_experiment(const std::string& name) {
  ensure_root();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    const std::string id = entry.path().filename().string();
    if (!entry.is_directory() || id == ".trash" || id == "models") continue;
    auto meta = read_meta((entry.path() / "meta.yaml").string());
    if (meta["name"] == name && meta["lifecycle_stage"] == "active") return id;
  }
  if (ec) io_error("cannot list", root_);
  const std::string id = random_digits_id();
  make_dirs(fs::path(root_) / id);
  const std::string now = std::to_string(int64_t(std::time(nullptr)) * 1000);
  try {
    write_meta((fs::path(root_) / id / "meta.yaml").string(),
               {{"artifact_location", yaml_quote("file://" + root_ + "/" + id)},
                {"creation_time", now},
                {"experiment_id", yaml_quote(id)},
                {"last_update_time", now},
                {"lifecycle_stage", "active"},
                {"name", yaml_quote(name)}});
  } catch (...) {
    remove_partial(fs::path(root_) / id);
    throw;
  }
  return id;
}

std::string MlflowFileStore::create_run(const std::string& experiment_id, const std::string& run_name, int64_t start_ms,
                                        const MlflowPairs& tags) {
  ensure_root();
  const std::string id = random_hex_id();
  const fs::path dir = fs::path(root_) / experiment_id / id;
  try {
    for (const char* sub : {"metrics", "params", "artifacts", "tags"}) make_dirs(dir / sub);
    write_meta((dir / "meta.yaml").string(), {{"artifact_uri", yaml_quote("file://" + dir.string() + "/artifacts")},
                                              {"deleted_time", "null"},
                                              {"end_time", "null"},
                                              {"entry_point_name", "''"},
                                              {"experiment_id", yaml_quote(experiment_id)},
                                              {"lifecycle_stage", "active"},
                                              {"run_id", yaml_quote(id)},
                                              {"run_name", yaml_quote(run_name)},
                                              {"run_uuid", yaml_quote(id)},
                                              {"source_name", "''"},
                                              {"source_type", "4"},
                                              {"source_version", "''"},
                                              {"start_time", std::to_string(start_ms)},
                                              {"status", status_code(MlflowRunStatus::Running)},
                                              {"tags", "[]"},
                                              {"user_id", yaml_quote(user_name())}});
    MlflowPairs all = tags;
    all.emplace_back("mlflow.runName", run_name);
    log_batch(id, {}, {}, all);
  } catch (...) {
    remove_partial(dir);  // the id was never returned: nothing refers to this run
    throw;
  }
  return id;
}

std::string MlflowFileStore::find_run_dir(const std::string& run_id) const {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    if (!entry.is_directory() || entry.path().filename() == ".trash") continue;
    if (fs::exists(entry.path() / run_id / "meta.yaml")) return (entry.path() / run_id).string();
  }
  return "";
}

std::optional<MlflowPairs> MlflowFileStore::run_params(const std::string& run_id) {
  const std::string dir = find_run_dir(run_id);
  if (dir.empty()) return std::nullopt;
  if (read_meta(dir + "/meta.yaml")["lifecycle_stage"] != "active") return std::nullopt;
  MlflowPairs params;
  const fs::path pdir = fs::path(dir) / "params";
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(pdir, ec); !ec && it != fs::recursive_directory_iterator(); ++it)
    // A .tmp is a param write a killed writer left behind, not a param.
    if (it->is_regular_file() && it->path().extension() != ".tmp")
      params.emplace_back(fs::relative(it->path(), pdir).string(), read_text(it->path()));
  return params;
}

void MlflowFileStore::log_batch(const std::string& run_id, const std::vector<MlflowMetric>& metrics,
                                const MlflowPairs& params, const MlflowPairs& tags) {
  const std::string dir = find_run_dir(run_id);
  if (dir.empty())
    throw MlflowError("MLflow file store " + root_ + ": no run " + run_id, /*transient=*/false,
                      "RESOURCE_DOES_NOT_EXIST");
  for (const auto& [k, v] : params) {
    check_key(k);
    const fs::path p = fs::path(dir) / "params" / k;
    if (fs::exists(p)) {
      if (read_text(p) != v)
        throw MlflowError("MLflow: param '" + k + "' was logged with another value; params cannot change",
                          /*transient=*/false, "INVALID_PARAMETER_VALUE");
      continue;
    }
    write_whole(p, v);
  }
  // Points of one key appended together: one open per key and batch.
  std::vector<std::string> order;
  std::map<std::string, std::string> lines;
  for (const MlflowMetric& m : metrics) {
    check_key(m.key);
    if (!lines.count(m.key)) order.push_back(m.key);
    lines[m.key] += std::to_string(m.timestamp_ms) + " " + double_text(m.value) + " " + std::to_string(m.step) + "\n";
  }
  for (const std::string& k : order) append_lines(fs::path(dir) / "metrics" / k, lines[k]);
  for (const auto& [k, v] : tags) {
    check_key(k);
    write_whole(fs::path(dir) / "tags" / k, v);
  }
}

void MlflowFileStore::update_run(const std::string& run_id, MlflowRunStatus status, int64_t end_ms) {
  const std::string dir = find_run_dir(run_id);
  if (dir.empty())
    throw MlflowError("MLflow file store " + root_ + ": no run " + run_id, /*transient=*/false,
                      "RESOURCE_DOES_NOT_EXIST");
  std::ifstream in(dir + "/meta.yaml");
  std::map<std::string, std::string> raw;  // the lines as written (values still YAML)
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(": ");
    if (colon != std::string::npos) raw[line.substr(0, colon)] = line.substr(colon + 2);
  }
  raw["status"] = status_code(status);
  raw["end_time"] = status == MlflowRunStatus::Running ? std::string("null") : std::to_string(end_ms);
  write_meta(dir + "/meta.yaml", raw);
}

MlflowRunStatus MlflowFileStore::run_status(const std::string& run_id) {
  const std::string dir = find_run_dir(run_id);
  if (dir.empty())
    throw MlflowError("MLflow file store " + root_ + ": no run " + run_id, /*transient=*/false,
                      "RESOURCE_DOES_NOT_EXIST");
  const std::string code = read_meta(dir + "/meta.yaml")["status"];
  for (MlflowRunStatus s : {MlflowRunStatus::Finished, MlflowRunStatus::Failed, MlflowRunStatus::Killed})
    if (code == status_code(s)) return s;
  return MlflowRunStatus::Running;
}

std::vector<int64_t> MlflowFileStore::metric_steps(const std::string& run_id, const std::string& key) {
  check_key(key);
  const std::string dir = find_run_dir(run_id);
  if (dir.empty())
    throw MlflowError("MLflow file store " + root_ + ": no run " + run_id, /*transient=*/false,
                      "RESOURCE_DOES_NOT_EXIST");
  std::vector<int64_t> steps;
  std::istringstream in(read_text(fs::path(dir) / "metrics" / key));
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no '\n' after it: a torn line (a writer killed mid-line), not a point
    std::istringstream is(line);
    std::string ts, value;
    int64_t step = 0;
    if (is >> ts >> value) {
      if (!(is >> step)) step = 0;  // a two-field line is step 0 (MLflow's reader)
      steps.push_back(step);
    }
  }
  return steps;
}

}  // namespace wmtp
