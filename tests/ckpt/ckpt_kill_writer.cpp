// Helper program for test_kill_writer.sh (not a gtest).
//   ckpt_kill_writer write DIR MB   : loop forever saving checkpoints of ~MB megabytes through
//                                     CheckpointDir (keep_last = 2), in several tensors with a short
//                                     pause between them, so a kill lands mid-write; each rank
//                                     writes its pid to DIR/pid.<rank> first.
//   ckpt_kill_writer check DIR      : resume = auto; load the checkpoint found at this world size and
//                                     check every value and checksum; print "ok step N".
#include <ATen/ATen.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "core/error.h"
#include "latest_checkpoint.h"
#include "comm/mpi_env.h"

using namespace wmtp;

namespace {

const int kTensors = 8;

std::vector<TensorSpec> specs_for(int64_t mb) {
  std::vector<TensorSpec> s;
  const int64_t per = mb * (1 << 20) / 4 / kTensors / 256;
  for (int i = 0; i < kTensors; ++i) s.push_back({"block." + std::to_string(i) + ".weight", {per, 256}});
  return s;
}

// Value of element i of tensor t at `step`: exact in float32, different for every step.
at::Tensor values(int64_t step, int t, int64_t begin, int64_t end) {
  return (at::arange(begin, end, at::kDouble).fmod(1 << 20) + double(step * 1000 + t)).to(at::kFloat);
}

int run_write(MPI_Comm comm, const std::string& dir, int64_t mb) {
  const int rank = comm_rank(comm), world = comm_size(comm);
  CheckpointDir cd(dir, comm);
  cd.begin_save(0);  // creates the directory
  { std::ofstream(dir + "/pid." + std::to_string(rank)) << getpid() << "\n"; }
  auto specs = specs_for(mb);
  for (int64_t step = 1;; ++step) {
    const std::string tmp = cd.begin_save(step);
    CheckpointWriter w(tmp, comm, {CheckpointKind::Full, "", step});
    for (int t = 0; t < kTensors; ++t) {
      const int64_t n = specs[t].shape[0] * specs[t].shape[1], per = (n + world - 1) / world;
      const int64_t b = std::min(n, per * rank), e = std::min(n, b + per);
      w.write_tensors("model/block" + std::to_string(t), {specs[t]}, {{specs[t].name, b, values(step, t, b, e)}});
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    TrainState st;
    st.set_int("step", step);
    w.write_train_state(st);
    w.close();
    cd.commit(step, 2);
    if (rank == 0) printf("committed %lld\n", static_cast<long long>(step)), fflush(stdout);
  }
}

int run_check(MPI_Comm comm, const std::string& dir) {
  const std::string path = test::latest_checkpoint(comm, dir);
  CheckpointReader r(path, comm);
  const int64_t step = r.read_train_state().get_int("step");
  if (step != r.header().step) throw_input("step mismatch");
  const int rank = comm_rank(comm), world = comm_size(comm);
  int64_t mb = 0;
  for (int t = 0; t < kTensors; ++t) {
    auto shape = r.tensor_shape("model/block" + std::to_string(t), "block." + std::to_string(t) + ".weight");
    mb += shape[0] * shape[1] * 4;
  }
  auto specs = specs_for(mb >> 20);
  for (int t = 0; t < kTensors; ++t) {
    const int64_t n = specs[t].shape[0] * specs[t].shape[1], per = (n + world - 1) / world;
    const int64_t b = std::min(n, per * rank), e = std::min(n, b + per);
    std::vector<TensorPiece> pieces = {{specs[t].name, b, at::empty({e - b})}};
    r.read_tensors("model/block" + std::to_string(t), {specs[t]}, pieces);
    if (!at::equal(pieces[0].data, values(step, t, b, e))) throw_input("tensor ", t, " has wrong values");
  }
  // Verification covers any layout: the nested groups this writer uses (model/blockN) included.
  const ChecksumReport rep = r.verify_checksums();
  if (rep.tensors != kTensors) throw_input("verify_checksums checked ", rep.tensors, " tensors, not ", kTensors);
  if (!rep.mismatched.empty()) throw_input("checksum mismatch in ", rep.mismatched.front());
  if (rank == 0) printf("ok step %lld %s\n", static_cast<long long>(step), path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MpiEnv mpi(&argc, &argv);
  try {
    std::string mode = argc > 2 ? argv[1] : "";
    if (mode == "write" && argc == 4) return run_write(mpi.world(), argv[2], std::stoll(argv[3]));
    if (mode == "check" && argc == 3) return run_check(mpi.world(), argv[2]);
    fprintf(stderr, "usage: ckpt_kill_writer write DIR MB | check DIR\n");
    return 2;
  } catch (const std::exception& e) {
    fprintf(stderr, "ckpt_kill_writer: rank %d: %s\n", mpi.rank(), e.what());
    mpi.abort(1);
  }
}
