// The checkpoint directory protocol in one process: file names, commit (rename + `latest`),
// retention that never deletes what `latest` names, stale .tmp files never counted as complete,
// resume = auto / never / path, and the [checkpoint] config checks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "core/error.h"
#include "ckpt_test_util.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

namespace fs = std::filesystem;

void save_step(CheckpointDir& cd, int64_t step, int64_t keep_last) {
  const std::string tmp = cd.begin_save(step);
  EXPECT_EQ(fs::path(tmp).filename().string(), checkpoint_file_name(step) + ".tmp");
  CheckpointWriter w(tmp, MPI_COMM_NULL, {"full", "", step});
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
  EXPECT_EQ(r.info().step, 50);

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
  { std::ofstream(cd.tmp_path_for(46)) << "junk"; }
  save_step(cd, 47, 0);
  EXPECT_FALSE(fs::exists(cd.tmp_path_for(46)));
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
