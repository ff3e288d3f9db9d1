// The checkpoint directory protocol in one process: file names, commit (rename + `latest`),
// retention that never deletes what `latest` names nor counts a damaged file, stale .tmp files never
// counted as complete, resume = auto / never / path (falling back past a corrupt checkpoint, and
// refusing to start over when none is usable), one run per directory (its lock, and recovery from a
// dead holder's), an unusable directory (or a directory where its lock goes) found at start-up, and
// the [checkpoint] config checks.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "core/check.h"
#include "core/error.h"
#include "core/h5.h"
#include "ckpt_test_util.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

namespace fs = std::filesystem;

void save_step(CheckpointDir& cd, int64_t step, int64_t keep_last) {
  const std::string tmp = cd.begin_save(step);
  EXPECT_EQ(fs::path(tmp).filename().string(), checkpoint_file_name(step) + ".tmp");
  CheckpointWriter w(tmp, MPI_COMM_NULL, {CheckpointKind::Full, "", step});
  std::vector<TensorSpec> specs = {{"w", {4}}};
  w.write_tensors(kModelGroup, specs, {{"w", 0, at::full({4}, float(step))}});
  w.close();
  EXPECT_FALSE(fs::exists(cd.path_for(step)));  // not complete before commit
  EXPECT_EQ(cd.commit(step, keep_last), cd.path_for(step));
  EXPECT_FALSE(fs::exists(tmp));
}

TEST(CheckpointDir, FileNames) {
  EXPECT_EQ(checkpoint_file_name(123), "step_00000123.h5");
  EXPECT_EQ(parse_checkpoint_step("step_00000123.h5"), 123);
  EXPECT_EQ(parse_checkpoint_step("step_123456789.h5"), 123456789);
  EXPECT_FALSE(parse_checkpoint_step("step_00000123.h5.tmp"));
  EXPECT_FALSE(parse_checkpoint_step("step_.h5"));
  EXPECT_FALSE(parse_checkpoint_step("step_12a.h5"));
  EXPECT_FALSE(parse_checkpoint_step("latest"));
}

TEST(CheckpointDir, CommitLatestAndRetention) {
  const std::string dir = scratch_dir("ckpt_dir_retention") + "/run";
  CheckpointDir cd(dir, MPI_COMM_NULL);
  EXPECT_EQ(cd.find_latest(), "");  // the directory does not even exist yet
  for (int64_t s : {10, 20, 30, 40, 50}) save_step(cd, s, 2);
  EXPECT_EQ(cd.complete_steps(), (std::vector<int64_t>{40, 50}));
  EXPECT_EQ(cd.read_latest(), "step_00000050.h5");
  EXPECT_EQ(cd.find_latest(), cd.path_for(50));
  CheckpointReader r(cd.find_latest(), MPI_COMM_NULL);
  EXPECT_EQ(r.header().step, 50);

  // A writer died while writing step 60: its .tmp is never complete and resume ignores it.
  { std::ofstream(cd.tmp_path_for(60)) << "half a file"; }
  EXPECT_EQ(cd.find_latest(), cd.path_for(50));

  // Resumed from step 40 (an older checkpoint): saving 45 keeps 45 although 50 is newer; `latest`
  // names the live lineage, and the stale .tmp of step 60 (newer) stays for a human to look at.
  save_step(cd, 45, 1);
  EXPECT_EQ(cd.read_latest(), "step_00000045.h5");
  EXPECT_EQ(cd.complete_steps(), (std::vector<int64_t>{45, 50}));
  EXPECT_EQ(cd.find_latest(), cd.path_for(45));
  EXPECT_TRUE(fs::exists(cd.tmp_path_for(60)));

  // Stale .tmp of an older step is cleaned by the next commit.
  // So is the lock file Open MPI's shared-file-pointer component leaves beside a file open when the
  // job was killed; a file that merely looks alike (another extension) stays.
  { std::ofstream(cd.tmp_path_for(46)) << "junk"; }
  const std::string mpi_lock = cd.tmp_path_for(46) + "-916606297-25994.lock";
  const std::string lookalike = cd.tmp_path_for(46) + "-916606297-25994.txt";
  { std::ofstream(mpi_lock) << "8 bytes"; }
  { std::ofstream(lookalike) << "mine"; }
  save_step(cd, 47, 0);
  EXPECT_FALSE(fs::exists(cd.tmp_path_for(46)));
  EXPECT_FALSE(fs::exists(mpi_lock));
  EXPECT_TRUE(fs::exists(lookalike));
  EXPECT_EQ(cd.complete_steps(), (std::vector<int64_t>{45, 47, 50}));  // keep_last = 0 keeps all
}

TEST(CheckpointDir, FindLatestFallsBackWhenThePointerIsBad) {
  const std::string dir = scratch_dir("ckpt_dir_fallback");
  CheckpointDir cd(dir, MPI_COMM_NULL);
  save_step(cd, 1, 0);
  save_step(cd, 2, 0);
  // `latest` names a file that is gone: the newest valid complete file is used.
  fs::remove(cd.path_for(2));
  EXPECT_EQ(cd.find_latest(), cd.path_for(1));
  // A complete-looking name that is not a checkpoint is skipped.
  { std::ofstream(cd.path_for(3)) << "not hdf5"; }
  fs::remove(fs::path(dir) / "latest");
  EXPECT_EQ(cd.find_latest(), cd.path_for(1));
}

TEST(CheckpointDir, ResolveResume) {
  const std::string dir = scratch_dir("ckpt_dir_resume");
  CheckpointConfig cfg;
  cfg.dir = dir;
  EXPECT_EQ(resolve_resume_path(cfg, MPI_COMM_NULL), "");  // auto, nothing yet
  CheckpointDir cd(dir, MPI_COMM_NULL);
  save_step(cd, 5, 0);
  EXPECT_EQ(resolve_resume_path(cfg, MPI_COMM_WORLD), cd.path_for(5));
  cfg.resume = "never";
  EXPECT_EQ(resolve_resume_path(cfg, MPI_COMM_NULL), "");
  cfg.resume = cd.path_for(5);
  EXPECT_EQ(resolve_resume_path(cfg, MPI_COMM_NULL), cd.path_for(5));
  cfg.resume = dir + "/missing.h5";
  try {
    resolve_resume_path(cfg, MPI_COMM_NULL);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("missing.h5"), std::string::npos);
  }
}

// A setting that takes "a checkpoint file or a run's checkpoint directory" ([rho1] reference,
// [verifiable] critic): a directory means the file its `latest` names; a file is itself; a directory
// whose `latest` is missing or names no checkpoint file is an error naming the setting.
TEST(CheckpointDir, ResolveCheckpointFile) {
  const std::string dir = scratch_dir("ckpt_dir_resolve");
  {
    CheckpointDir cd(dir, MPI_COMM_NULL);
    save_step(cd, 3, 0);
    save_step(cd, 7, 0);
  }
  EXPECT_EQ(resolve_checkpoint_file(dir, "[x] y"), (fs::path(dir) / "step_00000007.h5").string());
  { std::ofstream(fs::path(dir) / "latest") << "step_00000003.h5\n"; }  // a resume from step 3
  EXPECT_EQ(resolve_checkpoint_file(dir, "[x] y"), (fs::path(dir) / "step_00000003.h5").string());
  const std::string file = (fs::path(dir) / "step_00000007.h5").string();
  EXPECT_EQ(resolve_checkpoint_file(file, "[x] y"), file);
  { std::ofstream(fs::path(dir) / "latest") << "notes.txt\n"; }
  try {
    resolve_checkpoint_file(dir, "[rho1] reference");
    ADD_FAILURE() << "a directory whose latest names no checkpoint was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("[rho1] reference = " + dir), std::string::npos) << e.what();
  }
  fs::remove(fs::path(dir) / "latest");
  EXPECT_THROW(resolve_checkpoint_file(dir, "[verifiable] critic"), Error);
}

// Flips one bit of /model/w's first element in place (the file stays a valid HDF5 file).
void corrupt_data(const std::string& path) {
  haddr_t offset;
  {
    H5Handle f = h5::open_file(path, MPI_COMM_NULL);
    H5Handle d(WMTP_H5_CHECK(H5Dopen2(f, "model/w", H5P_DEFAULT)));
    offset = H5Dget_offset(d);
  }
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  char c = 0;
  io.seekg(std::streamoff(offset + 2));
  io.read(&c, 1);
  c ^= 0x20;
  io.seekp(std::streamoff(offset + 2));
  io.write(&c, 1);
}

// Runs `fn`, expects Error of `kind` whose message has every fragment.
template <class Fn>
void expect_error(Fn fn, ErrorKind kind, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what() << "\n  lacks: " << f;
  }
}

// Checkpoints of steps 1-3 in a fresh directory `name`, step 3's data corrupt; resume = "auto" on it.
CheckpointConfig corrupt_newest_of_three(const std::string& name) {
  CheckpointConfig cfg;
  cfg.dir = scratch_dir(name);
  CheckpointDir cd(cfg.dir, MPI_COMM_NULL);
  for (int64_t s : {1, 2, 3}) save_step(cd, s, 0);
  corrupt_data(cd.path_for(3));
  return cfg;
}

// A corrupt newest checkpoint is moved aside (kept, named in a warning) and resume takes the previous
// one; retention then does not count it among the newest keep_last (it would have deleted step 2).
TEST(CheckpointDir, AutoResumeFallsBackPastACorruptCheckpoint) {
  const CheckpointConfig cfg = corrupt_newest_of_three("ckpt_dir_corrupt");
  const std::string& dir = cfg.dir;
  EXPECT_EQ(resolve_resume_path(cfg, MPI_COMM_NULL), dir + "/" + checkpoint_file_name(2));
  EXPECT_FALSE(fs::exists(dir + "/" + checkpoint_file_name(3)));
  EXPECT_TRUE(fs::exists(dir + "/" + checkpoint_file_name(3) + ".corrupt"));
  CheckpointDir cd(dir, MPI_COMM_NULL);
  save_step(cd, 4, 2);  // the run goes on from step 2
  EXPECT_EQ(cd.complete_steps(), (std::vector<int64_t>{2, 4}));
}

// resume is one TOML string, parsed once: two keywords, and any other value names a file.
TEST(CheckpointDir, ResumeMode) {
  CheckpointConfig cfg;
  EXPECT_EQ(cfg.resume_mode(), ResumeMode::Auto);
  cfg.resume = "never";
  EXPECT_EQ(cfg.resume_mode(), ResumeMode::Never);
  for (const char* path : {"runs/x/step_00000003.h5", "Auto", "never.h5", "./auto"}) {
    cfg.resume = path;
    EXPECT_EQ(cfg.resume_mode(), ResumeMode::File) << path;
  }
}

// What resume = "auto" does with each checkpoint it tries, in order: open it (header, /train), let the
// run check it, then load it — each file loaded once. A file damaged in its tensors fails while it
// loads; then the previous one is tried, and the damaged one set aside only once another has loaded.
TEST(CheckpointDir, AutoResumeChecksThenLoadsEachFileOnce) {
  const CheckpointConfig cfg = corrupt_newest_of_three("ckpt_dir_attempts");
  const std::string& dir = cfg.dir;
  std::vector<std::string> calls;
  ResumeAttempt attempt;
  attempt.check = [&](const CheckpointReader& r, const TrainState&) {
    calls.push_back("check " + std::to_string(r.header().step));
  };
  attempt.load = [&](const CheckpointReader& r, const TrainState&) {
    calls.push_back("load " + std::to_string(r.header().step));
    std::vector<TensorPiece> pieces = {{"w", 0, at::empty({4})}};
    r.read_tensors(kModelGroup, {{"w", {4}}}, pieces);  // verified as it is read: step 3's fails here
  };
  EXPECT_EQ(resume_checkpoint(cfg, MPI_COMM_NULL, attempt), dir + "/" + checkpoint_file_name(2));
  EXPECT_EQ(calls, (std::vector<std::string>{"check 3", "load 3", "check 2", "load 2"}));
  EXPECT_TRUE(fs::exists(dir + "/" + checkpoint_file_name(3) + ".corrupt"));
}

// A check that refuses ends the resume there: nothing is loaded, no older file is tried, nothing is
// moved aside, and the refusal is the error.
TEST(CheckpointDir, ARefusedCheckpointIsNeitherLoadedNorSkipped) {
  const std::string dir = scratch_dir("ckpt_dir_refused");
  CheckpointConfig cfg;
  cfg.dir = dir;
  {
    CheckpointDir cd(dir, MPI_COMM_NULL);
    for (int64_t s : {1, 2}) save_step(cd, s, 0);
  }
  int loads = 0;
  ResumeAttempt attempt;
  attempt.check = [](const CheckpointReader& r, const TrainState&) {
    throw_input_identical("refused ", r.header().path);  // what a frozen model that changed does
  };
  attempt.load = [&](const CheckpointReader&, const TrainState&) { ++loads; };
  for (const std::string& resume : {std::string("auto"), dir + "/" + checkpoint_file_name(1)}) {
    cfg.resume = resume;
    expect_error([&] { resume_checkpoint(cfg, MPI_COMM_NULL, attempt); }, ErrorKind::Input, {"refused"});
  }
  EXPECT_EQ(loads, 0);
  EXPECT_EQ(CheckpointDir(dir, MPI_COMM_NULL).complete_steps(), (std::vector<int64_t>{1, 2}));
  EXPECT_FALSE(fs::exists(dir + "/" + checkpoint_file_name(2) + ".corrupt"));
}

// Retention counts only files that open as checkpoints, and deletes none that do not.
TEST(CheckpointDir, RetentionDoesNotCountAnUnreadableFile) {
  const std::string dir = scratch_dir("ckpt_dir_retention_bad");
  CheckpointDir cd(dir, MPI_COMM_NULL);
  for (int64_t s : {1, 2, 3}) save_step(cd, s, 0);
  fs::resize_file(cd.path_for(3), fs::file_size(cd.path_for(3)) / 2);
  save_step(cd, 4, 2);
  EXPECT_EQ(cd.complete_steps(), (std::vector<int64_t>{2, 3, 4}));  // 1 deleted; 2 kept; 3 left as it is
}

// resume = "auto" on a directory whose checkpoints are all unusable is an input error naming each
// file and why — never a silent start from step 0 (which retention could then use to delete them).
TEST(CheckpointDir, AutoResumeRefusesWhenNoCheckpointIsUsable) {
  const std::string dir = scratch_dir("ckpt_dir_all_bad");
  CheckpointConfig cfg;
  cfg.dir = dir;
  {
    CheckpointDir cd(dir, MPI_COMM_NULL);
    save_step(cd, 1, 0);
    save_step(cd, 2, 0);
    corrupt_data(cd.path_for(1));
    fs::resize_file(cd.path_for(2), 100);
  }
  expect_error([&] { resolve_resume_path(cfg, MPI_COMM_NULL); }, ErrorKind::Input,
               {checkpoint_file_name(1), checkpoint_file_name(2), "none is usable", "corrupt", "resume = \"never\""});
  EXPECT_TRUE(fs::exists(dir + "/" + checkpoint_file_name(1)));  // nothing moved or deleted
  cfg.resume = "never";
  EXPECT_EQ(resolve_resume_path(cfg, MPI_COMM_NULL), "");
  // A directory with nothing complete in it (a first save that died) is a fresh start.
  const std::string fresh = scratch_dir("ckpt_dir_only_tmp");
  { std::ofstream(fresh + "/" + checkpoint_file_name(1) + ".tmp") << "half"; }
  cfg.dir = fresh;
  cfg.resume = "auto";
  EXPECT_EQ(resolve_resume_path(cfg, MPI_COMM_NULL), "");
}

// One run per directory: a second one is refused, naming the holder; when the holder dies (kill -9),
// its lock goes with it and the directory can be used again.
TEST(CheckpointDir, SecondRunOnTheSameDirectoryIsRefused) {
  const std::string dir = scratch_dir("ckpt_dir_lock");
  const std::string log = dir + "/../ckpt_dir_lock.holder.log";
  CommandResult started = run_command(std::string(WMTP_CKPT_HELPER) + " hold " + dir + " 60 > " + log +
                                      " 2>&1 & echo $!");
  const long pid = std::stol(started.output);
  for (int i = 0; i < 300 && run_command("grep -c holding " + log).output.find('1') == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  expect_error([&] { CheckpointDir(dir, MPI_COMM_NULL); }, ErrorKind::Usage,
               {dir, "in use by another run", "pid " + std::to_string(pid), "lock"});
  kill(pid_t(pid), SIGKILL);
  for (int i = 0; i < 100 && kill(pid_t(pid), 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_NO_THROW(CheckpointDir(dir, MPI_COMM_NULL));
}

// An unusable [checkpoint] dir fails at start-up (constructing the CheckpointDir), not at the first
// save after hours of training.
TEST(CheckpointDir, UnusableDirectoryIsFoundAtStartUp) {
  const std::string base = scratch_dir("ckpt_dir_unusable");
  { std::ofstream(base + "/a_file") << "x"; }
  expect_error([&] { CheckpointDir(base + "/a_file", MPI_COMM_NULL); }, ErrorKind::Usage,
               {base + "/a_file", "not a directory"});
  expect_error([&] { CheckpointDir(base + "/a_file/sub", MPI_COMM_NULL); }, ErrorKind::Usage,
               {base + "/a_file/sub", "cannot create"});
  EXPECT_NO_THROW(CheckpointDir(base + "/new/deeper", MPI_COMM_NULL));
  EXPECT_TRUE(fs::is_directory(base + "/new/deeper"));
  // A directory where the lock file goes is bad input (exit 2) naming it, not a runtime failure.
  fs::create_directories(base + "/locked/lock");
  expect_error([&] { CheckpointDir(base + "/locked", MPI_COMM_NULL); }, ErrorKind::Usage,
               {base + "/locked/lock", "is a directory", "[checkpoint] dir"});
}

TEST(CheckpointDir, ConfigValidation) {
  CheckpointConfig cfg;
  EXPECT_NO_THROW(validate_checkpoint_config(cfg));
  cfg.keep_last = -1;
  EXPECT_THROW(validate_checkpoint_config(cfg), Error);
  cfg = CheckpointConfig();
  cfg.every = -5;
  EXPECT_THROW(validate_checkpoint_config(cfg), Error);
  cfg = CheckpointConfig();
  cfg.dir = "";
  EXPECT_THROW(validate_checkpoint_config(cfg), Error);
}

}  // namespace
}  // namespace wmtp::test
