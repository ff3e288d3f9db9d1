// Run name, flattened config and tags (see run_record.h).
#include "track/run_record.h"

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <toml++/toml.h>

#include "core/error.h"
#include "core/log.h"

namespace wmtp {

namespace {

void flatten(const toml::table& t, const std::string& prefix, StringPairs& out) {
  for (const auto& [k, node] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const toml::table* sub = node.as_table()) {
      flatten(*sub, key, out);
    } else if (const auto* s = node.as_string()) {
      out.emplace_back(key, s->get());
    } else {
      std::ostringstream os;
      node.visit([&](const auto& v) { os << v; });
      out.emplace_back(key, os.str());
    }
  }
}

}  // namespace

std::string run_display_name(const std::string& run_dir) {
  std::filesystem::path p = std::filesystem::path(run_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  const std::string name = p.filename().string();
  return name.empty() || name == "." ? std::filesystem::absolute(p).lexically_normal().filename().string() : name;
}

StringPairs flatten_config(const std::string& toml_text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(std::string_view(toml_text), std::string_view(source));
  } catch (const toml::parse_error& e) {
    throw_input(source, ": not a TOML configuration: ", e.description());
  }
  StringPairs out;
  flatten(root, "", out);
  return out;
}

std::string points_kept_note(const RunRecord& run, const std::string& mlflow_uri) {
  if (run.points_file.empty()) return "";
  if (std::filesystem::path(run.points_file).filename() != "metrics.jsonl")
    return run.points_file + " has every figure";
  std::string note = run.points_file + " has every point";
  if (!mlflow_uri.empty())
    note += "; bin/track-sync " + run.run_dir + " --mlflow " + mlflow_uri + " uploads what is missing";
  return note;
}

StringPairs run_tags(const RunRecord& info) {
  StringPairs t;
  const char* user = std::getenv("USER");
  t.emplace_back("mlflow.user", user ? user : "");
  t.emplace_back("mlflow.source.name", info.program);
  t.emplace_back("mlflow.source.type", "LOCAL");
  t.emplace_back("wmtp.program", info.program);
  t.emplace_back("wmtp.version", WMTP_VERSION);
  t.emplace_back("wmtp.run_dir", std::filesystem::absolute(info.run_dir).lexically_normal().string());
  if (info.world_size <= 0) return t;
  t.emplace_back("wmtp.world_size", std::to_string(info.world_size));
  t.emplace_back("wmtp.host", host_name());
  if (const char* job = std::getenv("SLURM_JOB_ID")) t.emplace_back("wmtp.slurm_job_id", job);
  return t;
}

}  // namespace wmtp
