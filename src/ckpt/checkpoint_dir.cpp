// Checkpoint directory protocol: temp file, fsync, rename, `latest` pointer, retention, resume.
#include "ckpt/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/h5.h"
#include "dist/agree.h"

namespace fs = std::filesystem;

namespace wmtp {

void validate_checkpoint_config(const CheckpointConfig& cfg) {
  if (cfg.dir.empty()) throw_usage("[checkpoint] dir must not be empty");
  if (cfg.every < 0) throw_usage("[checkpoint] every = ", cfg.every, " must be >= 0");
  if (cfg.keep_last < 0) throw_usage("[checkpoint] keep_last = ", cfg.keep_last, " must be >= 0");
  if (cfg.resume.empty()) throw_usage("[checkpoint] resume must be \"auto\", \"never\" or a checkpoint path");
}

std::string checkpoint_file_name(int64_t step) {
  char buf[64];
  snprintf(buf, sizeof(buf), "step_%08lld.h5", static_cast<long long>(step));
  return buf;
}

std::optional<int64_t> parse_checkpoint_step(const std::string& name) {
  const std::string prefix = "step_", suffix = ".h5";
  if (name.size() <= prefix.size() + suffix.size()) return std::nullopt;
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return std::nullopt;
  std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 18) return std::nullopt;
  for (char c : digits)
    if (c < '0' || c > '9') return std::nullopt;
  return std::stoll(digits);
}

bool is_valid_checkpoint_file(const std::string& path) {
  try {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) return false;
    if (!h5::is_hdf5_file(path)) return false;
    H5Handle f = h5::open_file(path, MPI_COMM_NULL);
    return h5::has_attr(f, "format") && h5::read_attr_string(f, "format") == "wmtp-checkpoint";
  } catch (const Error&) {
    return false;
  }
}

CheckpointDir::CheckpointDir(std::string dir, MPI_Comm comm) : dir_(std::move(dir)), comm_(comm) {}

std::string CheckpointDir::path_for(int64_t step) const { return (fs::path(dir_) / checkpoint_file_name(step)).string(); }
std::string CheckpointDir::tmp_path_for(int64_t step) const { return path_for(step) + ".tmp"; }

std::string CheckpointDir::begin_save(int64_t step) {
  on_rank0(comm_, [&] {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) throw_runtime("cannot create checkpoint directory '", dir_, "': ", ec.message());
    fs::remove(tmp_path_for(step), ec);
  });
  return tmp_path_for(step);
}

std::string CheckpointDir::commit(int64_t step, int64_t keep_last) {
  const std::string tmp = tmp_path_for(step), final_path = path_for(step);
  barrier(comm_);  // every rank has closed the file before rank 0 syncs and renames it
  on_rank0(comm_, [&] {
    if (!fs::exists(tmp)) throw_runtime("checkpoint commit: '", tmp, "' does not exist");
    commit_file(tmp, final_path);
    write_file_atomically((fs::path(dir_) / "latest").string(), checkpoint_file_name(step) + "\n");

    // Retention, then leftovers of writers that died before this step.
    std::error_code ec;
    if (keep_last > 0) {
      std::vector<int64_t> steps = complete_steps();
      std::sort(steps.rbegin(), steps.rend());
      const std::string keep = read_latest();
      for (size_t i = size_t(keep_last); i < steps.size(); ++i)
        if (checkpoint_file_name(steps[i]) != keep) fs::remove(path_for(steps[i]), ec);
    }
    for (const auto& entry : fs::directory_iterator(dir_, ec)) {
      std::string name = entry.path().filename().string();
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
        auto s = parse_checkpoint_step(name.substr(0, name.size() - 4));
        if (s && *s < step) fs::remove(entry.path(), ec);
      }
    }
  });
  return final_path;
}

std::vector<int64_t> CheckpointDir::complete_steps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    if (auto s = parse_checkpoint_step(entry.path().filename().string())) steps.push_back(*s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string CheckpointDir::read_latest() const {
  std::ifstream in(fs::path(dir_) / "latest");
  std::string name;
  if (!in || !std::getline(in, name)) return "";
  while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
  return parse_checkpoint_step(name) ? name : "";
}

std::string CheckpointDir::find_latest() const {
  std::string found;
  if (comm_rank(comm_) == 0) {
    // `latest` first: after resuming from an older checkpoint it names the live lineage even when
    // newer files of an abandoned run remain. Without a usable pointer, the newest valid file.
    const std::string named = read_latest();
    if (!named.empty() && is_valid_checkpoint_file((fs::path(dir_) / named).string())) {
      found = (fs::path(dir_) / named).string();
    } else {
      std::vector<int64_t> steps = complete_steps();
      for (auto it = steps.rbegin(); it != steps.rend(); ++it)
        if (is_valid_checkpoint_file(path_for(*it))) {
          found = path_for(*it);
          break;
        }
    }
  }
  return bcast_string(comm_, found);
}

std::string resolve_resume_path(const CheckpointConfig& cfg, MPI_Comm comm) {
  if (cfg.resume == "never") return "";
  if (cfg.resume == "auto") return CheckpointDir(cfg.dir, comm).find_latest();
  agreed(comm, [&] {
    if (!fs::exists(cfg.resume)) throw_usage("[checkpoint] resume = \"", cfg.resume, "\": no such checkpoint file");
  });
  return cfg.resume;
}

}  // namespace wmtp
