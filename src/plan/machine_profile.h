// MachineProfile: the rates the step-time model (plan/step_time.h) divides by — a rank's sustained
// matmul rate and memory bandwidth, how much communication progresses while a rank computes, and
// per link class a latency and nccl-tests bus bandwidths. A small TOML file that `[runtime]
// machine_profile` names: written by bin/calibrate-machine on the machines themselves, or by hand
// from published figures (configs/machines/h100-8gpu-ib400.toml, with its sources).
//
// Link classes, by the ranks a collective's group spans (docs/sharding.md, "Time model"):
//   intra  every rank of the group on one node (NVLink, shared memory);
//   inter  one rank per node, while every rank of each node runs the same collective in its own
//          group at once (hybrid_shard's replica groups; NCCL's rails);
//   span   the ranks_per_node ranks of each node in one group across nodes (a flat group across
//          nodes: full_shard at more than one node). Optional: without it a ring across nodes is
//          taken to run at min(intra, k x inter) with k ranks of the group per node, as NCCL's
//          channels spread a ring over every NIC of a node.
// Bandwidths are nccl-tests' bus bandwidths (its doc/PERFORMANCE.md): busbw = algbw x (n-1)/n for
// all-gather and reduce-scatter, x 2(n-1)/n for all-reduce, algbw = bytes / time with bytes the
// full buffer (all-gather's output, reduce-scatter's input, all-reduce's buffer). A ring moves
// exactly that factor of the buffer over each link, so busbw is the link's rate whatever n.
#pragma once
#include <string>

namespace wmtp {

struct LinkProfile {
  double alpha_us = 0;               // latency of one ring step
  double all_gather_busbw_gbps = 0;  // GB/s (1e9 bytes)
  double reduce_scatter_busbw_gbps = 0;
  double all_reduce_busbw_gbps = 0;
  bool known() const { return all_gather_busbw_gbps > 0 && reduce_scatter_busbw_gbps > 0 && all_reduce_busbw_gbps > 0; }
  template <class V>
  void visit(V& v) {
    v.field("alpha_us", alpha_us,
            "latency of one ring step in microseconds (a collective of n ranks takes n-1 steps; "
            "an all-reduce 2(n-1))");
    v.field("all_gather_busbw_gbps", all_gather_busbw_gbps,
            "all-gather bus bandwidth in GB/s (nccl-tests: output bytes x (n-1)/n / time); 0 = not measured");
    v.field("reduce_scatter_busbw_gbps", reduce_scatter_busbw_gbps,
            "reduce-scatter bus bandwidth in GB/s (input bytes x (n-1)/n / time); 0 = not measured");
    v.field("all_reduce_busbw_gbps", all_reduce_busbw_gbps,
            "all-reduce bus bandwidth in GB/s (bytes x 2(n-1)/n / time); 0 = not measured");
  }
};

struct MachineProfileHeader {
  std::string name;        // "h100-8gpu-ib400", "test-hosts-2x2"
  int ranks_per_node = 0;  // the node the figures describe (the dry run's default ranks_per_node)
  std::string source;      // how the figures were obtained (calibrate-machine's command, or "published")
  template <class V>
  void visit(V& v) {
    v.field("name", name, "what the profile describes");
    v.field("ranks_per_node", ranks_per_node,
            "ranks (GPUs) per node the figures were measured with; the dry run's default for [runtime] ranks_per_node");
    v.field("source", source, "how the figures were obtained");
  }
};

struct ComputeProfile {
  double matmul_tflops_bf16 = 0;  // sustained per rank while every rank of the node computes; 0 = unknown
  double matmul_tflops_fp32 = 0;
  double memory_gbps = 0;  // the optimizer's streaming rate per rank (AdamW: 28 B per element)
  double overlap = 1;      // of a collective's time, the share that passes while the rank computes
  template <class V>
  void visit(V& v) {
    v.field("matmul_tflops_bf16", matmul_tflops_bf16,
            "sustained bf16 matmul rate per rank in TFLOP/s, every rank of the node computing at once (0 = unknown)");
    v.field("matmul_tflops_fp32", matmul_tflops_fp32, "the same in fp32 (0 = unknown)");
    v.field("memory_gbps", memory_gbps,
            "memory bandwidth per rank in GB/s that the optimizer's pass reaches (AdamW reads and writes 28 B per "
            "element)");
    v.field("overlap", overlap,
            "share of a collective's time that progresses while the rank computes: 1 = NCCL on its own stream; an MPI "
            "library without a progress thread moves little until the rank waits (calibrate-machine measures it)");
  }
};

struct MachineProfile {
  MachineProfileHeader machine;
  ComputeProfile compute;
  LinkProfile intra, inter, span;
  std::string path;  // the file it was read from ("" when built in memory)

  // Per-rank matmul rate in FLOP/s for a compute dtype of this size in bytes (2: bf16, 4: fp32); 0 = unknown.
  double matmul_flops(int dtype_bytes) const;
};

// Reads a profile; an unreadable file, an unknown key or a value out of range is a usage error
// naming `what` (the config key that named the file) and the file.
MachineProfile load_machine_profile(const std::string& path, const std::string& what = "[runtime] machine_profile");
// The profile as TOML, after `header` (comment lines, each starting with "# "), parsing back to the
// same values.
std::string machine_profile_toml(const MachineProfile& p, const std::string& header);
// Refuses values no machine has (negative rates, overlap outside [0, 1], a node of < 1 rank).
void check_machine_profile(const MachineProfile& p, const std::string& what);

}  // namespace wmtp
