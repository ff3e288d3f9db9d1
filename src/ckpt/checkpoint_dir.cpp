// Checkpoint directory protocol: temp file, fsync, rename, `latest` pointer, retention, resume.
#include "ckpt/checkpoint_dir.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ckpt/checkpoint.h"
#include "ckpt/dir_lock.h"
#include "core/config.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/h5.h"
#include "comm/agree.h"

namespace fs = std::filesystem;

namespace wmtp {

void validate_checkpoint_config(const CheckpointConfig& cfg) {
  if (cfg.dir.empty()) throw_usage("[checkpoint] dir must not be empty");
  if (cfg.every < 0) throw_usage("[checkpoint] every = ", cfg.every, " must be >= 0");
  if (cfg.keep_last < 0) throw_usage("[checkpoint] keep_last = ", cfg.keep_last, " must be >= 0");
  if (cfg.resume.empty()) throw_usage("[checkpoint] resume must be \"auto\", \"never\" or a checkpoint path");
}

ResumeMode CheckpointConfig::resume_mode() const {
  return choice_value<ResumeMode>(kResumeModeNames, resume).value_or(ResumeMode::File);
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
    return h5::has_attr(f, "format") && h5::read_attr_string(f, "format") == kCheckpointFormat;
  } catch (const Error&) {
    return false;
  }
}

CheckpointDir::CheckpointDir(std::string dir, MPI_Comm comm) : dir_(std::move(dir)), comm_(comm) {
  on_rank0(comm_, [&] {
    auto unusable = [&](const auto&... why) {
      throw_usage("[checkpoint] dir = \"", dir_, "\" cannot hold checkpoints: ", why...);
    };
    std::error_code ec;
    if (fs::exists(dir_, ec) && !fs::is_directory(dir_, ec)) unusable("it exists and is not a directory");
    fs::create_directories(dir_, ec);
    if (ec) unusable("cannot create it (", ec.message(), ")");
    // A file must be creatable there (permissions, read-only or full file system).
    const std::string probe = (fs::path(dir_) / ("write_test." + std::to_string(::getpid()))).string();
    std::FILE* f = std::fopen(probe.c_str(), "w");
    if (!f) unusable("cannot create a file in it (", std::strerror(errno), ")");
    const bool written = std::fputs("ok\n", f) >= 0;
    const bool closed = std::fclose(f) == 0;
    const int err = errno;
    std::remove(probe.c_str());
    if (!written || !closed) unusable("cannot write a file in it (", std::strerror(err), ")");
    lock_ = std::make_unique<DirLock>(dir_, "[checkpoint] dir");
  });
}

CheckpointDir::~CheckpointDir() = default;

std::string CheckpointDir::path_for(int64_t step) const {
  return (fs::path(dir_) / checkpoint_file_name(step)).string();
}
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
    try {
      commit_file(tmp, final_path);
    } catch (...) {
      std::remove(tmp.c_str());  // never complete: `latest` stays on the previous checkpoint
      throw;
    }
    write_file_atomically((fs::path(dir_) / "latest").string(), checkpoint_file_name(step) + "\n");

    // Retention, then leftovers of writers that died before this step. Only files that open as
    // checkpoints count among the newest keep_last; one that does not is neither counted nor deleted.
    std::error_code ec;
    if (keep_last > 0) {
      std::vector<int64_t> steps = complete_steps();
      std::sort(steps.rbegin(), steps.rend());
      const std::string keep = read_latest();
      int64_t kept = 0;
      for (int64_t s : steps) {
        if (checkpoint_file_name(s) == keep || s == step) {
          ++kept;
        } else if (is_valid_checkpoint_file(path_for(s))) {
          if (kept < keep_last) ++kept;
          else
            fs::remove(path_for(s), ec);
        }
      }
    }
    for (const auto& entry : fs::directory_iterator(dir_, ec)) {
      std::string name = entry.path().filename().string();
      // An older step's `.tmp` (a writer killed mid-write), and the `.tmp-<id>.lock` Open MPI's
      // shared-file-pointer component leaves beside a file it had open when the job was killed.
      const size_t tmp = name.find(".h5.tmp");
      if (tmp == std::string::npos) continue;
      const std::string rest = name.substr(tmp + 3);
      const bool mpi_lock = rest.size() > 9 && rest.compare(0, 5, ".tmp-") == 0 &&
                            rest.compare(rest.size() - 5, 5, ".lock") == 0;
      if (rest != ".tmp" && !mpi_lock) continue;
      auto s = parse_checkpoint_step(name.substr(0, tmp + 3));
      if (s && *s < step) fs::remove(entry.path(), ec);
    }
  });
  return final_path;
}

namespace {

std::vector<int64_t> steps_in(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    if (auto s = parse_checkpoint_step(entry.path().filename().string())) steps.push_back(*s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace

std::string read_latest_name(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "latest");
  std::string name;
  if (!in || !std::getline(in, name)) return "";
  while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
  return parse_checkpoint_step(name) ? name : "";
}

std::string resolve_checkpoint_file(const std::string& path, const std::string& key) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;
  const std::string latest = read_latest_name(path);
  if (latest.empty())
    throw Error(ErrorKind::Usage,
                detail::concat(key, " = ", path,
                               ": a directory without a `latest` checkpoint (name a step_N.h5 "
                               "file, or a run's checkpoint directory)"),
                Reach::Local);  // this node's view of the directory: callers agree on it
  return (fs::path(path) / latest).string();
}

namespace {

// The files resume = "auto" tries, in order: the one `latest` names (after a resume from an older
// checkpoint it names the live lineage, even when newer files of the abandoned run remain), then
// older ones, newest first. Without a usable pointer, every complete file, newest first.
std::vector<std::string> resume_candidates(const std::string& dir) {
  std::vector<int64_t> steps = steps_in(dir);
  std::sort(steps.rbegin(), steps.rend());
  const std::string named = read_latest_name(dir);
  std::optional<int64_t> top;
  if (!named.empty() && std::find(steps.begin(), steps.end(), *parse_checkpoint_step(named)) != steps.end())
    top = parse_checkpoint_step(named);
  std::vector<std::string> out;
  for (int64_t s : steps)
    if (!top || s <= *top) out.push_back((fs::path(dir) / checkpoint_file_name(s)).string());
  return out;
}

// The candidates every rank tries, in rank 0's view of the directory.
std::vector<std::string> agreed_candidates(const std::string& dir, MPI_Comm comm) {
  std::vector<std::string> candidates;
  if (comm_rank(comm) == 0) candidates = resume_candidates(dir);
  std::string joined;
  for (const auto& c : candidates) joined += c + "\n";
  joined = bcast_string(comm, joined);
  candidates.clear();
  for (size_t pos = 0; pos < joined.size();) {
    const size_t nl = joined.find('\n', pos);
    candidates.push_back(joined.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return candidates;
}

// Runs `fn`; returns "" or, when the file turned out damaged (an agreed input error), why. Anything
// else goes through: a refusal, or an error some ranks only saw (they cannot go on together).
template <class Fn>
std::string damage_in(Fn fn) {
  try {
    fn();
    return "";
  } catch (const Error& e) {
    if (!e.agreed() || e.kind() != ErrorKind::Input) throw;
    return e.what();
  }
}

// One checkpoint through `attempt`: opened (header, /train) and loaded, the run's check in between.
// Returns "" when it was loaded, else why the file is damaged.
std::string try_resume(const std::string& path, MPI_Comm comm, const ResumeAttempt& attempt) {
  std::unique_ptr<CheckpointReader> r;
  TrainState st;
  if (std::string why = damage_in([&] {
        r = std::make_unique<CheckpointReader>(path, comm);
        st = r->read_train_state();
      });
      !why.empty())
    return why;
  if (attempt.check) attempt.check(*r, st);
  return damage_in([&] {
    if (attempt.load) attempt.load(*r, st);
  });
}

// The resume = "auto" choice (see resume_checkpoint).
std::string resume_newest(const std::string& dir, MPI_Comm comm, const ResumeAttempt& attempt) {
  std::vector<std::pair<std::string, std::string>> bad;  // file, why
  for (const std::string& c : agreed_candidates(dir, comm)) {
    std::string why = try_resume(c, comm, attempt);
    if (why.empty()) {
      // Move the damaged newer ones aside: never resumed again, never counted by retention, kept
      // for a human to look at.
      on_rank0(comm, [&] {
        for (const auto& [file, reason] : bad) {
          const std::string aside = file + ".corrupt";
          std::fprintf(stderr,
                       "warning: checkpoint %s is unusable (%s); resuming from the previous one, %s. "
                       "The damaged file is kept as %s\n",
                       file.c_str(), reason.c_str(), c.c_str(), aside.c_str());
          if (std::rename(file.c_str(), aside.c_str()) != 0)
            throw_runtime("cannot rename '", file, "' to '", aside, "': ", std::strerror(errno));
        }
        std::fflush(stderr);
      });
      return c;
    }
    bad.emplace_back(c, why);
  }
  if (bad.empty()) return "";
  std::string list;
  for (const auto& [file, reason] : bad) list += "\n  " + file + ": " + reason;
  throw_input_agreed("[checkpoint] resume = \"auto\": ", dir, " holds checkpoints but none is usable:", list,
                     "\nRepair or remove them, name one with [checkpoint] resume = \"PATH\", or start from scratch "
                     "with resume = \"never\"");
}

// Loading as a check: every checksum in the file, each rank a share of it.
void verify_whole_file(const CheckpointReader& r, const TrainState&) {
  const ChecksumReport rep = r.verify_checksums();
  if (rep.mismatched.empty()) return;
  std::string names;
  for (size_t i = 0; i < rep.mismatched.size() && i < 3; ++i) names += (i ? ", /" : "/") + rep.mismatched[i];
  if (rep.mismatched.size() > 3) names += " and " + std::to_string(rep.mismatched.size() - 3) + " more";
  throw_input_agreed("corrupt: ", names, " do(es) not match the checksums written with them");
}

}  // namespace

std::string CheckpointDir::find_latest() const {
  CheckpointConfig cfg;
  cfg.dir = dir_;
  return resolve_resume_path(cfg, comm_);
}
std::vector<int64_t> CheckpointDir::complete_steps() const { return steps_in(dir_); }
std::string CheckpointDir::read_latest() const { return read_latest_name(dir_); }

std::string resume_checkpoint(const CheckpointConfig& cfg, MPI_Comm comm, const ResumeAttempt& attempt) {
  switch (cfg.resume_mode()) {
    case ResumeMode::Never: return "";
    case ResumeMode::Auto: return resume_newest(cfg.dir, comm, attempt);
    case ResumeMode::File: break;
  }
  agreed(comm, [&] {
    if (!fs::exists(cfg.resume)) throw_usage("[checkpoint] resume = \"", cfg.resume, "\": no such checkpoint file");
  });
  const CheckpointReader r(cfg.resume, comm);
  const TrainState st = r.read_train_state();
  if (attempt.check) attempt.check(r, st);
  if (attempt.load) attempt.load(r, st);
  return cfg.resume;
}

std::string resolve_resume_path(const CheckpointConfig& cfg, MPI_Comm comm) {
  return resume_checkpoint(cfg, comm, {nullptr, verify_whole_file});
}

}  // namespace wmtp
