// Helper program for the checkpoint tests (not a gtest), run in the real program frame
// (app/program.h) so that exit codes, messages and MPI shut-down are those of every wmtp program.
//   ckpt_helper write DIR KB    : saves checkpoints of ~KB kilobytes (tensors split across the ranks as
//                                 the engine splits them, /train, a config) through CheckpointDir,
//                                 keep_last = 0, until one fails; prints "committed N" after each
//                                 (test_disk_full.sh).
//   ckpt_helper check DIR       : resume = auto; the checkpoint found must read back with its values
//                                 and checksums; prints "ok step N".
//   ckpt_helper hold DIR SECS   : opens DIR as a run's checkpoint directory (taking its lock), prints
//                                 "holding", sleeps (test_checkpoint_dir.cpp: a second run).
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <string>
#include <vector>

#include "app/program.h"
#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "core/error.h"
#include "latest_checkpoint.h"

using namespace wmtp;

namespace {

const int kTensors = 4;

std::vector<TensorSpec> specs_for(int64_t kb) {
  std::vector<TensorSpec> s;
  const int64_t rows = std::max<int64_t>(1, kb * 1024 / 4 / kTensors / 64);
  for (int i = 0; i < kTensors; ++i) s.push_back({"layers." + std::to_string(i) + ".weight", {rows, 64}});
  return s;
}

at::Tensor values(int64_t step, int t, int64_t begin, int64_t end) {
  return (at::arange(begin, end, at::kDouble).fmod(1 << 20) + double(step * 1000 + t)).to(at::kFloat);
}

std::vector<TensorPiece> my_pieces(const std::vector<TensorSpec>& specs, int64_t step, MPI_Comm comm) {
  const int rank = comm_rank(comm), world = comm_size(comm);
  std::vector<TensorPiece> out;
  for (int t = 0; t < kTensors; ++t) {
    const int64_t n = specs[t].shape[0] * specs[t].shape[1], per = (n + world - 1) / world;
    const int64_t b = std::min(n, per * rank), e = std::min(n, b + per);
    out.push_back({specs[t].name, b, step < 0 ? at::empty({e - b}) : values(step, t, b, e)});
  }
  return out;
}

int run_write(MPI_Comm comm, const std::string& dir, int64_t kb) {
  CheckpointDir cd(dir, comm);
  const auto specs = specs_for(kb);
  for (int64_t step = 1; step <= 1000; ++step) {
    {
      CheckpointWriter w(cd.begin_save(step), comm, {CheckpointKind::Full, "", step});
      w.write_tensors(kModelGroup, specs, my_pieces(specs, step, comm));
      TrainState st;
      st.set_int("step", step);
      w.write_train_state(st);
      w.write_config_toml(std::string(2000, '#'));
      w.close();
    }
    cd.commit(step, 0);
    if (comm_rank(comm) == 0) std::printf("committed %lld\n", static_cast<long long>(step)), std::fflush(stdout);
  }
  throw_runtime("wrote 1000 checkpoints without filling the disk");
}

int run_check(MPI_Comm comm, const std::string& dir) {
  const std::string path = test::latest_checkpoint(comm, dir);
  CheckpointReader r(path, comm);
  const int64_t step = r.read_train_state().get_int("step");
  std::vector<TensorSpec> specs;
  for (const auto& n : r.tensor_names(kModelGroup)) specs.push_back({n, r.tensor_shape(kModelGroup, n)});
  auto pieces = my_pieces(specs, -1, comm);
  r.read_tensors(kModelGroup, specs, pieces);
  const auto want = my_pieces(specs, step, comm);
  for (size_t i = 0; i < pieces.size(); ++i)
    if (!at::equal(pieces[i].data, want[i].data)) throw_input(path, ": ", pieces[i].name, " has wrong values");
  if (comm_rank(comm) == 0) std::printf("ok step %lld %s\n", static_cast<long long>(step), path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Program prog(argc, argv, {"ckpt_helper", "test helper: checkpoints until the disk is full, checks, locks", ""});
  std::vector<std::string> args;
  prog.options().add_options()("args", boost::program_options::value<std::vector<std::string>>(&args), "");
  prog.positional("args", -1);
  return prog.run([&](ProgramContext& ctx) -> int {
    MPI_Comm comm = ctx.mpi.world();
    if (args.size() == 3 && args[0] == "write") return run_write(comm, args[1], std::stoll(args[2]));
    if (args.size() == 2 && args[0] == "check") return run_check(comm, args[1]);
    if (args.size() == 3 && args[0] == "hold") {
      CheckpointDir cd(args[1], comm);
      std::printf("holding\n");
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::seconds(std::stoll(args[2])));
      return 0;
    }
    throw_usage("usage: ckpt_helper write DIR KB | check DIR | hold DIR SECONDS");
  });
}
