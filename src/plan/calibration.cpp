// calibrate_machine(): the measurements behind a machine profile (see calibration.h for what each
// figure is and how it is taken).
#include "plan/calibration.h"

#include <mpi.h>
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <vector>

#include "comm/device.h"
#include "comm/mpi_env.h"
#include "comm/mpi_util.h"
#include "core/error.h"
#include "core/timer.h"
#include "plan/collective_time.h"
#include "shard/adamw_math.h"
#include "train/flops.h"

namespace wmtp {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string line(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string line(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  return std::string("# ") + buf + "\n";
}

// The slowest rank's time of `fn`, every rank starting together.
template <class Fn>
double timed(MPI_Comm world, c10::Device device, Fn&& fn) {
  barrier(world);
  Timer t;
  fn();
  synchronize(device);
  return all_max(world, t.seconds());
}

class LinkProbe {
 public:
  LinkProbe(Communicator& comm, MPI_Comm world, c10::Device device, const CalibrationOptions& o, int64_t max_bytes)
      : comm_(comm), world_(world), device_(device), o_(o), max_bytes_(max_bytes) {}

  // One collective of `bytes` (the full buffer) through the non-blocking call the engine uses.
  double run(Collective c, int64_t bytes) {
    const int n = comm_.size();
    const int64_t per = std::max<int64_t>(1, bytes / 4 / n);  // fp32 elements per rank's block
    const auto opt = at::TensorOptions().dtype(at::kFloat).device(device_);
    at::Tensor full = at::ones({per * n}, opt), part = at::ones({per}, opt);
    return timed(world_, device_, [&] {
      CommWorkPtr w = c == Collective::AllGather       ? comm_.all_gather_async(part, full)
                      : c == Collective::ReduceScatter ? comm_.reduce_scatter_async(full, part, ReduceOp::Sum)
                                                       : comm_.all_reduce_async(full, ReduceOp::Sum);
      w->wait();
    });
  }

  // alpha and the bus bandwidths of one link class. Each collective is timed at two sizes, M and
  // M/4, M grown until one takes sample_seconds: the bandwidth is the slope between them, and what
  // the line leaves at size 0 (a collective's fixed cost: handshakes, a TCP window opening, kernel
  // launches) is its latency, per ring step. The class's alpha is the median of the three; a
  // one-element all-reduce's is logged beside it.
  LinkProfile measure(const char* cls, std::string& log) {
    LinkProfile l;
    const int n = comm_.size();
    std::vector<double> small;
    for (int r = 0; r < 5; ++r) small.push_back(run(Collective::AllReduce, 4 * n));
    std::vector<double> alphas;
    for (Collective c : {Collective::AllGather, Collective::ReduceScatter, Collective::AllReduce}) {
      int64_t big = std::min<int64_t>(int64_t(1) << 20, max_bytes_);
      double t = run(c, big);
      while (t < o_.sample_seconds && big < max_bytes_) {
        big = std::min(max_bytes_, big * 4);
        t = run(c, big);
      }
      const int64_t little = std::max<int64_t>(big / 4, 4 * n);
      const double t_big = median({t, run(c, big), run(c, big)});
      const double t_little = median({run(c, little), run(c, little), run(c, little)});
      const int steps = (c == Collective::AllReduce ? 2 : 1) * (n - 1);
      const double f = busbw_factor(c, n);
      const double slope = (t_big - t_little) / double(big - little);  // seconds per byte of buffer
      double busbw, fixed;
      if (slope > 0) {
        busbw = f / slope / 1e9, fixed = std::clamp(t_little - slope * double(little), 0.0, t_little);
      } else {  // noise hid the slope: the large sample alone, no fixed cost
        busbw = f * double(big) / t_big / 1e9, fixed = 0;
      }
      alphas.push_back(fixed / steps * 1e6);
      (c == Collective::AllGather       ? l.all_gather_busbw_gbps
       : c == Collective::ReduceScatter ? l.reduce_scatter_busbw_gbps
                                        : l.all_reduce_busbw_gbps) = busbw;
      log += line(
          "[%s] %s: %.2f MiB %.4f s, %.2f MiB %.4f s (medians of 3) -> busbw %.4g GB/s, fixed %.4g s "
          "(%.4g us per step)",
          cls, collective_name(c), double(little) / double(1 << 20), t_little, double(big) / double(1 << 20), t_big,
          busbw, fixed, alphas.back());
    }
    l.alpha_us = median(alphas);
    log += line("[%s] %d rank(s) per group: alpha %.4g us per step (a one-element all-reduce: %.4g us per step)", cls,
                n, l.alpha_us, median(small) / (2.0 * (n - 1)) * 1e6);
    return l;
  }

 private:
  Communicator& comm_;
  MPI_Comm world_;
  c10::Device device_;
  const CalibrationOptions& o_;
  int64_t max_bytes_;
};

double measure_memory_gbps(MPI_Comm world, c10::Device device, std::string& log) {
  const int64_t n = device.is_cpu() ? (int64_t(1) << 23) : (int64_t(1) << 27);  // 224 MiB / 3.5 GiB of state
  const auto opt = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor p = at::ones({n}, opt), g = at::ones({n}, opt), m = at::zeros({n}, opt), v = at::zeros({n}, opt);
  AdamWRanges r;
  r.add(p, g, m, v);
  AdamWHyper h;
  h.lr = 1e-4;
  adamw_update(r, h);  // warm-up: pages touched, kernels loaded
  std::vector<double> ts;
  for (int i = 0; i < 5; ++i) ts.push_back(timed(world, device, [&] { adamw_update(r, h); }));
  const double gbps = 28.0 * double(n) / median(ts) / 1e9;
  log += line("memory: fused AdamW over %lld elements %.4f s (median of 5) -> %.4g GB/s (28 B per element)",
              (long long)n, median(ts), gbps);
  return gbps;
}

// The share of a collective that progresses while the ranks compute, as the engine's forward meets
// it: a pipeline of kUnits units, each unit's all-gather posted when the previous unit starts
// computing (prefetch depth 1), each unit's matmuls taking about half as long as its all-gather alone.
// step_time.h's rule gives that pipeline the time
//   T(f) = t_m + (kUnits - 1) (t_c + max(0, t_m - f t_c)) + t_c
// (t_m, t_c: one all-gather, one unit's matmuls, each alone); f is solved from the measured T.
// An MPI library progresses a posted collective inside later MPI calls (each unit's post) and its
// transport's buffers: this measures how much that amounts to.
double measure_overlap(Communicator& world_comm, LinkProbe& probe, MPI_Comm world, c10::Device device, int64_t bytes,
                       std::string& log) {
  constexpr int kUnits = 6;
  const double t_m = median({probe.run(Collective::AllGather, bytes), probe.run(Collective::AllGather, bytes),
                             probe.run(Collective::AllGather, bytes)});
  const int64_t n = device.is_cpu() ? 256 : 4096;
  const auto opt = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor a = at::randn({n, n}, opt), b = at::randn({n, n}, opt), c = at::mm(a, b);
  auto matmuls = [&](int k) {
    for (int i = 0; i < k; ++i) at::mm_out(c, a, b);
  };
  // About half the all-gather's time, so that f stays measurable (were the matmuls longer than the
  // all-gather, any f above t_m / t_c would hide it all): a first guess, then corrected once.
  int k = 8;
  double t_c = timed(world, device, [&] { matmuls(k); });
  for (int round = 0; round < 2; ++round) {
    k = std::max(1, int(double(k) * 0.5 * t_m / std::max(t_c, 1e-9)));
    t_c = median({timed(world, device, [&] { matmuls(k); }), timed(world, device, [&] { matmuls(k); }),
                  timed(world, device, [&] { matmuls(k); })});
  }
  const int world_n = world_comm.size();
  const int64_t per = std::max<int64_t>(1, bytes / 4 / world_n);
  std::vector<at::Tensor> full, part;
  for (int u = 0; u < kUnits; ++u) full.push_back(at::ones({per * world_n}, opt)), part.push_back(at::ones({per}, opt));
  std::vector<double> shares, times;
  for (int r = 0; r < 3; ++r) {
    times.push_back(timed(world, device, [&] {
      CommWorkPtr next = world_comm.all_gather_async(part[0], full[0]);
      for (int u = 0; u < kUnits; ++u) {
        next->wait();
        if (u + 1 < kUnits) next = world_comm.all_gather_async(part[u + 1], full[u + 1]);
        matmuls(k);
      }
    }));
    const double per_unit = (times.back() - t_m - t_c) / (kUnits - 1);  // t_c + what the wait adds
    shares.push_back(std::clamp((t_m - (per_unit - t_c)) / std::max(t_c, 1e-9), 0.0, 1.0));
  }
  const double f = median(shares);
  log += line(
      "overlap: %d units of an all-gather (%.4f s alone) and %d matmuls (%.4f s alone) pipelined: %.4f s "
      "(median of 3; %.4f s without overlap, %.4f s with all of it) -> overlap %.2f",
      kUnits, t_m, k, t_c, median(times), t_m + (kUnits - 1) * (t_c + t_m) + t_c,
      t_m + (kUnits - 1) * std::max(t_c, t_m) + t_c, f);
  return f;
}

}  // namespace

Calibration calibrate_machine(MpiEnv& mpi, Runtime& rt, const CalibrationOptions& o,
                              const std::function<void(const std::string&)>& progress) {
  Timer total;
  const MPI_Comm world = mpi.world();
  const int per_node = mpi.local_size(), nodes = mpi.node_count();
  if (!same_on_all_ranks(world, uint64_t(per_node)))
    throw_usage(
        "calibrate-machine: the nodes run different numbers of ranks; a profile describes nodes of one size "
        "(start the same number of tasks on every node)");
  auto say = [&](const std::string& what) {
    if (mpi.rank() == 0 && progress) progress(what);
  };
  Calibration out;
  MachineProfile& p = out.profile;
  p.machine.name = o.name;
  p.machine.ranks_per_node = per_node;
  p.machine.source = o.source;
  std::string& log = out.log;
  log += line("%d node(s) x %d rank(s), device %s, communicator %s", nodes, per_node, rt.device.str().c_str(),
              rt.comm->backend().c_str());

  for (at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    if (!(dtype == at::kBFloat16 ? o.bf16 : o.fp32)) continue;
    say(std::string("matmul rate, ") + (dtype == at::kFloat ? "fp32" : "bf16"));
    barrier(world);
    const std::vector<double> rates = time_matmul_rounds(dtype, rt.device, o.matmul_seconds, o.matmul_size);
    // The rank that sustains the least: the step waits for it.
    const double rate = -all_max(world, -median(rates));
    (dtype == at::kFloat ? p.compute.matmul_tflops_fp32 : p.compute.matmul_tflops_bf16) = rate / 1e12;
    log += line("matmul %s: %zu rounds, median %.4g GFLOP/s on the slowest rank (best here %.4g)",
                dtype == at::kFloat ? "fp32" : "bf16", rates.size(), rate / 1e9,
                *std::max_element(rates.begin(), rates.end()) / 1e9);
  }
  say("memory bandwidth");
  p.compute.memory_gbps = measure_memory_gbps(world, rt.device, log);

  const int64_t max_bytes = o.max_message_bytes > 0 ? o.max_message_bytes
                            : rt.device.is_cpu()    ? (int64_t(64) << 20)
                                                    : (int64_t(1) << 30);
  // Each class: every rank in its own group of that class at once. Hybrid sharding's groups of a
  // node's ranks are the intra-node groups, its replicas (one rank per node) the inter-node ones.
  if (mpi.world_size() > 1 && !rt.groups) add_shard_groups(rt, mpi, /*group_size=*/0);
  struct Cls {
    const char* name;
    LinkProfile* link;
    bool present;
    Communicator* comm;
  };
  const Cls classes[] = {{"intra", &p.intra, per_node > 1, rt.groups ? rt.groups->group.get() : nullptr},
                         {"inter", &p.inter, nodes > 1, rt.groups ? rt.groups->replica.get() : nullptr},
                         {"span", &p.span, nodes > 1 && per_node > 1, rt.comm.get()}};
  for (const Cls& c : classes) {
    if (!c.present) continue;
    say(std::string("link class ") + c.name);
    LinkProbe probe(*c.comm, world, rt.device, o, max_bytes);
    *c.link = probe.measure(c.name, log);
  }

  if (mpi.world_size() > 1) {
    say("overlap of communication and compute");
    LinkProbe world_probe(*rt.comm, world, rt.device, o, max_bytes);
    // The size the world's all-gather needed for a tenth of a second, measured above.
    int64_t bytes = std::min<int64_t>(int64_t(1) << 20, max_bytes);
    while (world_probe.run(Collective::AllGather, bytes) < o.sample_seconds && bytes < max_bytes)
      bytes = std::min(max_bytes, bytes * 4);
    p.compute.overlap = measure_overlap(*rt.comm, world_probe, world, rt.device, bytes, log);
  }
  out.seconds = total.seconds();
  log += line("calibration took %.1f s", out.seconds);
  check_machine_profile(p, "calibrate-machine");
  return out;
}

}  // namespace wmtp
