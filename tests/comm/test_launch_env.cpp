// Launcher detection over the environments srun and mpirun really hand to a rank. The variable sets
// below were captured on Slurm 22.05 (two slurmd on one host) with Debian's Open MPI 4.1: srun
// --mpi=pmix at 2 nodes x 2 tasks, mpirun inside an sbatch allocation, and a batch script.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.h"
#include "comm/mpi_env.h"

namespace wmtp {
namespace {

using Env = std::map<std::string, std::string>;

LaunchEnv detect(const Env& env) {
  return detect_launch([&](const char* var) -> const char* {
    auto it = env.find(var);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// Task `procid` of `srun --mpi=pmix -N2 --ntasks-per-node=2` (block distribution: node = procid / 2).
Env srun_2x2(int procid) {
  return {{"SLURM_JOB_ID", "7"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_LOCALID", std::to_string(procid % 2)},
          {"SLURM_NODEID", std::to_string(procid / 2)},
          {"SLURM_NTASKS", "4"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_MPI_TYPE", "pmix"},
          {"PMIX_RANK", std::to_string(procid)},
          {"PMIX_NAMESPACE", "slurm.pmix.7.0"}};
}

TEST(LaunchEnv, SrunTwoNodesTwoTasksEach) {
  for (int p = 0; p < 4; ++p) {
    LaunchEnv e = detect(srun_2x2(p));
    EXPECT_EQ(e.launcher, Launcher::srun);
    EXPECT_EQ(e.rank, p);
    EXPECT_EQ(e.world_size, 4);
    EXPECT_EQ(e.local_rank, p % 2);
    EXPECT_EQ(e.local_size, 2);
    EXPECT_EQ(e.node, p / 2);
    EXPECT_EQ(e.node_count, 2);
    EXPECT_EQ(e.mpi_type, "pmix");
    EXPECT_TRUE(e.has_pmi);
    EXPECT_EQ(launch_hint(e), "");
  }
  EXPECT_EQ(detect(srun_2x2(3)).describe(), "srun (pmix): task 3 of 4, node 1 of 2, local 1 of 2");
}

TEST(LaunchEnv, SrunUnevenNodesTakeTheirOwnTaskCount) {
  // srun -n5 over 3 nodes: 2, 2, 1 tasks. The last node's only task has local size 1.
  Env env = srun_2x2(0);
  env["SLURM_STEP_NUM_TASKS"] = "5";
  env["SLURM_STEP_NUM_NODES"] = "3";
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2),1";
  env["SLURM_PROCID"] = "4";
  env["SLURM_NODEID"] = "2";
  env["SLURM_LOCALID"] = "0";
  LaunchEnv e = detect(env);
  EXPECT_EQ(e.local_size, 1);
  EXPECT_EQ(e.node, 2);
  env["SLURM_PROCID"] = "3";
  env["SLURM_NODEID"] = "1";
  env["SLURM_LOCALID"] = "1";
  EXPECT_EQ(detect(env).local_size, 2);
}

TEST(LaunchEnv, MpirunInsideAnAllocationIgnoresTheDaemonsSlurmIds) {
  // mpirun -np 4 in an sbatch script on one node: every rank inherits SLURM_PROCID=0, SLURM_LOCALID=0
  // of the step that runs Open MPI's daemon. Taking the rank from them would make four rank 0s.
  for (int r = 0; r < 4; ++r) {
    Env env = {{"SLURM_JOB_ID", "8"},
               {"SLURM_STEP_ID", "0"},
               {"SLURM_PROCID", "0"},
               {"SLURM_LOCALID", "0"},
               {"SLURM_NODEID", "0"},
               {"SLURM_STEP_NUM_TASKS", "1"},
               {"SLURM_STEP_NUM_NODES", "1"},
               {"SLURM_STEP_TASKS_PER_NODE", "1"},
               {"OMPI_COMM_WORLD_RANK", std::to_string(r)},
               {"OMPI_COMM_WORLD_SIZE", "4"},
               {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)},
               {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
               {"PMIX_RANK", std::to_string(r)}};
    LaunchEnv e = detect(env);
    EXPECT_EQ(e.launcher, Launcher::mpirun);
    EXPECT_EQ(e.rank, r);
    EXPECT_EQ(e.world_size, 4);
    EXPECT_EQ(e.local_rank, r);
    EXPECT_EQ(e.local_size, 4);
    EXPECT_EQ(check_launch(e, r, 4, r, 1), "");
  }
}

TEST(LaunchEnv, BatchScriptWithoutSrunIsNoLauncher) {
  // The batch shell has SLURM_PROCID=0 and SLURM_LOCALID=0 but no SLURM_STEP_ID.
  Env env = {{"SLURM_JOB_ID", "9"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"},
             {"SLURM_NODEID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}};
  LaunchEnv e = detect(env);
  EXPECT_EQ(e.launcher, Launcher::none);
  EXPECT_EQ(e.batch_tasks, 4);
  std::string w = check_launch(e, 0, 1, 0, 1);
  EXPECT_NE(w.find("4 tasks"), std::string::npos) << w;
  EXPECT_EQ(check_launch(detect({}), 0, 1, 0, 1), "");  // plain single process
}

TEST(LaunchEnv, SrunWithoutPmixIsStoppedWithTheFix) {
  // srun --mpi=none: Open MPI either aborts in MPI_Init or each task comes up as a world of one.
  Env env = srun_2x2(1);
  env.erase("SLURM_MPI_TYPE");
  env.erase("PMIX_RANK");
  env.erase("PMIX_NAMESPACE");
  LaunchEnv e = detect(env);
  EXPECT_FALSE(e.has_pmi);
  try {
    check_launch(e, 0, 1, 0, 1);
    FAIL() << "a world of 1 under a 4-task srun step was accepted";
  } catch (const Error& err) {
    std::string m = err.what();
    EXPECT_NE(m.find("srun started 4 task(s) but MPI sees a world of 1"), std::string::npos) << m;
    EXPECT_NE(m.find("--mpi=pmix"), std::string::npos) << m;
    EXPECT_EQ(err.exit_code(), 2);
  }
#ifdef OPEN_MPI
  EXPECT_NE(launch_hint(e).find("--mpi=pmix"), std::string::npos);
  env["SLURM_MPI_TYPE"] = "pmi2";
  env["PMI_FD"] = "11";
  EXPECT_NE(launch_hint(detect(env)).find("with --mpi=pmi2"), std::string::npos);
#endif
}

TEST(LaunchEnv, SoftDisagreementsAreWarnings) {
  LaunchEnv e = detect(srun_2x2(2));
  EXPECT_EQ(check_launch(e, 2, 4, 0, 2), "");
  std::string w = check_launch(e, 2, 4, 1, 1);
  EXPECT_NE(w.find("local rank 0 but MPI node-local rank 1"), std::string::npos) << w;
  EXPECT_NE(w.find("2 node(s) but MPI groups the ranks into 1"), std::string::npos) << w;
}

TEST(LaunchEnv, MalformedValuesNameTheVariable) {
  Env env = srun_2x2(0);
  env["SLURM_PROCID"] = "zero";
  try {
    detect(env);
    FAIL() << "SLURM_PROCID=zero accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("SLURM_PROCID='zero'"), std::string::npos) << err.what();
  }
  env = srun_2x2(0);
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x3)";  // 6 tasks on 3 nodes, but the step has 4 on 2
  EXPECT_THROW(detect(env), Error);
  env = srun_2x2(0);
  env["SLURM_PROCID"] = "4";  // not below 4 tasks
  EXPECT_THROW(detect(env), Error);
}

TEST(LaunchEnv, TasksPerNodeList) {
  EXPECT_EQ(parse_tasks_per_node("8"), std::vector<int>({8}));
  EXPECT_EQ(parse_tasks_per_node("2(x3),1"), std::vector<int>({2, 2, 2, 1}));
  EXPECT_EQ(parse_tasks_per_node("1,3(x2),2"), std::vector<int>({1, 3, 3, 2}));
  for (const char* bad : {"", "x", "2(x)", "2(3)", "2(x0)", "2,", ",2", "2(x2", "-1", "2(x2)3"})
    EXPECT_THROW(parse_tasks_per_node(bad), Error) << "'" << bad << "'";
}

}  // namespace
}  // namespace wmtp
