// bench-checkpoint-io: checkpoint write and read bandwidth of the HDF5 format v1 (collective MPI-IO,
// engine-like flat layout) beside the disk's own dd bandwidth, measured in the same run.
// The tensors are bench-small's (dim 512, 8 layers, 8 heads, n_future 4, vocab 32000: ~60M fp32
// parameters) plus both AdamW moments, ~720 MB per checkpoint. Writes include the commit (flush,
// fsync, rename); caches are dropped (posix_fadvise) before every read, and dd uses conv=fdatasync
// and iflag=nocache, so both sides go to the disk.
//   mpirun -np 2 build/bench/bench-checkpoint-io [--dir DIR] [--repeat 5] [--scale 1.0] [--verify both|on|off]
// Reads verify the checksums by default (what resume, merge-lora and export do); --verify both (the
// default) reads every checkpoint twice, with and without, in alternating order, so the cost of
// verification is measured side by side.
// The machine's other load moves single runs a lot: the summary is the median over runs of the
// per-run ratio (each run's checkpoint figure over the dd figure measured right after it).
#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "core/timer.h"
#include "comm/mpi_env.h"
#include "model/mtp.h"

using namespace wmtp;
namespace fs = std::filesystem;

namespace {

int64_t shape_numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct Range {
  size_t spec;
  int64_t begin, end;
};

// Engine layout: all tensors concatenated, padded to a multiple of world, rank r owns slice r.
std::vector<Range> engine_ranges(const std::vector<TensorSpec>& specs, int rank, int world) {
  int64_t total = 0;
  for (const auto& s : specs) total += shape_numel_of(s.shape);
  const int64_t per = (total + world - 1) / world, lo = per * rank, hi = lo + per;
  std::vector<Range> out;
  int64_t base = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const int64_t n = shape_numel_of(specs[i].shape);
    const int64_t b = std::clamp(lo - base, int64_t(0), n), e = std::clamp(hi - base, int64_t(0), n);
    if (e > b) out.push_back({i, b, e});
    base += n;
  }
  return out;
}

void drop_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Runs a dd command line and returns MB/s from its bytes and seconds ("N bytes ... copied, T s, ...").
double run_dd(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return 0;
  char line[512];
  double mbps = 0;
  while (fgets(line, sizeof(line), p)) {
    long long bytes = 0;
    double secs = 0;
    const char* copied = std::strstr(line, "copied, ");
    if (copied && std::sscanf(line, "%lld", &bytes) == 1 && std::sscanf(copied + 8, "%lf", &secs) == 1 && secs > 0)
      mbps = bytes / secs / 1e6;
  }
  pclose(p);
  return mbps;
}

}  // namespace

int main(int argc, char** argv) {
  MpiEnv mpi(&argc, &argv);
  std::string dir = "bench-checkpoint-io.tmp";
  int repeat = 5;
  double scale = 1.0;
  std::string verify = "both";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--dir") dir = argv[i + 1];
    else if (k == "--repeat")
      repeat = std::stoi(argv[i + 1]);
    else if (k == "--scale")
      scale = std::stod(argv[i + 1]);
    else if (k == "--verify")
      verify = argv[i + 1];
  }
  if (verify != "both" && verify != "on" && verify != "off") {
    if (mpi.rank() == 0) std::fprintf(stderr, "--verify must be both, on or off\n");
    return 2;
  }
  const int rank = mpi.rank(), world = mpi.world_size();
  MPI_Comm comm = mpi.world();

  ModelArgs args;
  args.dim = 512;
  args.n_layers = 8;
  args.n_heads = 8;
  args.n_future_tokens = 4;
  args.vocab_size = int64_t(32000 * scale);
  std::vector<TensorSpec> specs = tensor_specs_from(MtpModel(args).param_specs());
  int64_t numel = 0;
  for (const auto& s : specs) numel += shape_numel_of(s.shape);
  const double mb = 3.0 * double(numel) * 4 / 1e6;  // params + exp_avg + exp_avg_sq

  // This rank's pieces: views into three flat buffers (what the engine would hand over).
  auto ranges = engine_ranges(specs, rank, world);
  int64_t mine = 0;
  for (const auto& r : ranges) mine += r.end - r.begin;
  at::Tensor flat[3] = {at::randn({mine}), at::randn({mine}), at::rand({mine})};
  auto pieces = [&](int g) {
    std::vector<TensorPiece> out;
    int64_t pos = 0;
    for (const auto& r : ranges) {
      out.push_back({specs[r.spec].name, r.begin, flat[g].narrow(0, pos, r.end - r.begin)});
      pos += r.end - r.begin;
    }
    return out;
  };
  const char* groups[3] = {kModelGroup, kExpAvgGroup, kExpAvgSqGroup};

  if (rank == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::printf("bench-checkpoint-io: %d rank(s), %zu tensors, %.1fM parameters, %.0f MB per checkpoint, dir %s\n",
                world, specs.size(), numel / 1e6, mb, dir.c_str());
  }
  barrier(comm);
  CheckpointDir cd(dir, comm);
  std::vector<double> w_mbps, r_mbps, ddw_mbps, ddr_mbps, w_ratio, r_ratio, rp_ratio, ru_mbps, rv_ratio;
  for (int it = 0; it < repeat; ++it) {
    const int64_t step = it + 1;
    barrier(comm);
    Timer tw;
    {
      CheckpointWriter w(cd.begin_save(step), comm, {CheckpointKind::Full, "", step});
      for (int g = 0; g < 3; ++g) w.write_tensors(groups[g], specs, pieces(g));
      w.close();
    }
    const std::string path = cd.commit(step, 1);
    const double tw_s = tw.seconds();
    barrier(comm);

    // One read of the whole checkpoint into fresh buffers, caches dropped first; returns seconds.
    bool same = true;
    auto timed_read = [&](bool check) {
      if (rank == 0) drop_cache(path);
      barrier(comm);
      std::vector<at::Tensor> back = {at::empty({mine}), at::empty({mine}), at::empty({mine})};
      Timer tr;
      {
        CheckpointReader r(path, comm, {ReadMode::Independent, check});
        for (int g = 0; g < 3; ++g) {
          std::vector<TensorPiece> ps = pieces(g);
          int64_t pos = 0;
          for (auto& p : ps) p.data = back[g].narrow(0, pos, p.data.numel()), pos += p.data.numel();
          r.read_tensors(groups[g], specs, ps);
        }
      }
      barrier(comm);
      const double s = tr.seconds();
      for (int g = 0; g < 3; ++g) same = same && at::equal(back[g], flat[g]);
      return s;
    };
    // Alternate which goes first, so neither always meets the colder disk.
    double tr_s = 0, tu_s = 0;
    if (verify == "both" && it % 2 == 1) tu_s = timed_read(false), tr_s = timed_read(true);
    else if (verify == "both")
      tr_s = timed_read(true), tu_s = timed_read(false);
    else if (verify == "on")
      tr_s = timed_read(true);
    else
      tr_s = timed_read(false);
    if (!same) std::fprintf(stderr, "rank %d: read back differs!\n", rank);

    double ddw = 0, ddr = 0, ddpr = 0;
    if (rank == 0) {
      const std::string f = dir + "/dd.bin";
      const long long count = (long long)(mb * 1e6 / (4 << 20)) + 1;
      ddw = run_dd("dd if=/dev/zero of=" + f + " bs=4M count=" + std::to_string(count) + " conv=fdatasync");
      run_dd("dd if=" + f + " iflag=nocache count=0");
      drop_cache(f);
      ddr = run_dd("dd if=" + f + " of=/dev/null bs=4M");
      // The same file read by `world` concurrent dd streams (one slice each), like the ranks do.
      run_dd("dd if=" + f + " iflag=nocache count=0");
      drop_cache(f);
      const long long slice = (count + world - 1) / world;
      std::string par = "(";
      for (int k = 0; k < world; ++k)
        par += "dd if=" + f + " of=/dev/null bs=4M skip=" + std::to_string(k * slice) +
               " count=" + std::to_string(slice) + " 2>/dev/null & ";
      par += "wait)";
      Timer tp;
      if (std::system(par.c_str()) == 0) ddpr = double(count) * (4 << 20) / tp.seconds() / 1e6;
      fs::remove(f);
      std::printf("  run %d: write %6.1f MB/s (%.2f s)  read%s %6.1f MB/s (%.2f s)", it + 1, mb / tw_s, tw_s,
                  verify == "off" ? "" : " verified", mb / tr_s, tr_s);
      if (tu_s > 0) std::printf("  read unverified %6.1f MB/s (%.2f s)", mb / tu_s, tu_s);
      std::printf(" | dd write %6.1f  dd read %6.1f  %d x dd read %6.1f MB/s%s\n", ddw, ddr, world, ddpr,
                  same ? "" : "  READ MISMATCH");
    }
    w_mbps.push_back(mb / tw_s), r_mbps.push_back(mb / tr_s), ddw_mbps.push_back(ddw), ddr_mbps.push_back(ddr);
    if (ddw > 0 && ddr > 0) w_ratio.push_back(mb / tw_s / ddw), r_ratio.push_back(mb / tr_s / ddr);
    if (ddpr > 0) rp_ratio.push_back(mb / tr_s / ddpr);
    if (tu_s > 0) ru_mbps.push_back(mb / tu_s), rv_ratio.push_back(tu_s / tr_s);
    barrier(comm);
  }
  if (rank == 0) {
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double w = median(w_mbps), r = median(r_mbps), dw = median(ddw_mbps), dr = median(ddr_mbps);
    std::printf("median: write %.1f MB/s (dd %.1f MB/s), read%s %.1f MB/s (dd %.1f MB/s)\n", w, dw,
                verify == "off" ? "" : " verified", r, dr);
    if (!ru_mbps.empty())
      std::printf("verification: read unverified %.1f MB/s; median per-run ratio verified/unverified = %.2f\n",
                  median(ru_mbps), median(rv_ratio));
    if (!w_ratio.empty())
      std::printf("median per-run ratio: write/dd = %.2f, read/dd = %.2f, read/(%d parallel dd) = %.2f (goal >= 0.5)\n",
                  median(w_ratio), median(r_ratio), world, rp_ratio.empty() ? 0.0 : median(rp_ratio));
    fs::remove_all(dir);
  }
  return 0;
}
