// Calibration: measures, on the machines a job will run on and with its launcher's layout, the
// figures of a machine profile (plan/machine_profile.h) in well under two minutes — what
// bin/calibrate-machine runs. Every rank takes part in every measurement at once, as in training:
//   - matmul rate per compute dtype: the median round of square matmuls (train/flops.h) while every
//     rank of the node runs them;
//   - memory bandwidth: the fused AdamW update (shard/adamw_math.h) over a buffer much larger than
//     the caches, at 28 B per element;
//   - per link class (intra: the ranks of each node; inter: one rank per node, every node-local
//     rank in its own group at once; span: the whole world when it has several nodes of several
//     ranks), through the run's communicator (MPI, or NCCL on GPUs) and its non-blocking calls, as
//     the sharding engine posts them: per collective, times at two sizes (M grown until one takes
//     sample_seconds, and M/4) give the bus bandwidth (nccl-tests' definition) as the slope and a
//     fixed cost per collective as the intercept; alpha, per ring step, is the median of the three
//     collectives' fixed costs (on TCP a window opening and a rendezvous handshake per message weigh
//     far more than a small message's latency, which is logged beside it);
//   - overlap: a pipeline of units as the engine's forward runs them (each unit's all-gather over
//     the world posted as the previous unit starts its matmuls, which take about half as long); the
//     share of a collective that progresses while the ranks compute is what makes step_time.h's
//     rule give the pipeline's measured time.
// Times are the slowest rank's (each sample is all-reduced with max), medians of a few samples.
#pragma once
#include <functional>
#include <string>

#include "comm/runtime.h"
#include "plan/machine_profile.h"

namespace wmtp {

class MpiEnv;

struct CalibrationOptions {
  std::string name = "calibrated";  // [machine] name
  bool bf16 = true, fp32 = true;    // the compute dtypes to time
  int64_t matmul_size = 0;          // 0: train/flops.h's size (CPU 2048, GPU 8192)
  double matmul_seconds = 2;        // per dtype
  int64_t max_message_bytes = 0;    // 0: CPU 64 MiB, GPU 1 GiB
  double sample_seconds = 0.3;      // the larger bandwidth sample lasts at least this long
  std::string source;               // recorded as [machine] source (the command line)
};

struct Calibration {
  MachineProfile profile;
  std::string log;  // the raw figures, one comment line each ("# ..."), written above the profile
  double seconds = 0;
};

// Collective over every rank of `mpi`; `progress` (rank 0 only, may be empty) is told what is being
// measured. Adds the runtime's shard groups of one node each (comm/shard_groups.h) when it has none.
// Throws Error(Usage) when nodes hold different numbers of ranks or ranks are not placed by node.
Calibration calibrate_machine(MpiEnv& mpi, Runtime& rt, const CalibrationOptions& o,
                              const std::function<void(const std::string&)>& progress);

}  // namespace wmtp
