// Collective times from the machine profile's link classes: ring step counts, nccl-tests' bus
// bandwidths.
#include "plan/collective_time.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace wmtp {

namespace {

double busbw_gbps(const LinkProfile& l, Collective c) {
  switch (c) {
    case Collective::AllGather: return l.all_gather_busbw_gbps;
    case Collective::ReduceScatter: return l.reduce_scatter_busbw_gbps;
    case Collective::AllReduce: return l.all_reduce_busbw_gbps;
  }
  return 0;
}

const LinkProfile& need(const LinkProfile& l, const char* cls, const GroupSpan& g, const MachineProfile& m) {
  if (!l.known())
    throw_usage("machine profile '", m.path.empty() ? m.machine.name : m.path, "' has no [", cls,
                "] figures, and a group of ", g.ranks, " rank(s) on ", g.nodes, " node(s) needs them (", cls,
                std::string(cls) == "intra" ? ": measured with more than one rank per node"
                                            : ": measured with more than one node",
                "; run bin/calibrate-machine on the layout the job will use)");
  return l;
}

}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::AllGather: return "all-gather";
    case Collective::ReduceScatter: return "reduce-scatter";
    case Collective::AllReduce: return "all-reduce";
  }
  return "?";
}

GroupSpan group_span(int size, int stride, int ranks_per_node) {
  std::set<int> nodes;
  for (int i = 0; i < size; ++i) nodes.insert(i * stride / std::max(1, ranks_per_node));
  return GroupSpan{size, static_cast<int>(nodes.size())};
}

double busbw_factor(Collective c, int n) {
  if (n <= 1) return 0;
  const double f = double(n - 1) / double(n);
  return c == Collective::AllReduce ? 2 * f : f;
}

CollectiveCost collective_cost(Collective c, int64_t bytes, const GroupSpan& g, const MachineProfile& m) {
  CollectiveCost out;
  if (g.ranks <= 1) return out;
  const int per_step = c == Collective::AllReduce ? 2 : 1;
  const int steps = per_step * (g.ranks - 1), inter_steps = per_step * (g.nodes - 1);
  double alpha_s = 0, gbps = 0;
  if (g.nodes == 1) {
    const LinkProfile& l = need(m.intra, "intra", g, m);
    alpha_s = steps * l.alpha_us * 1e-6, gbps = busbw_gbps(l, c), out.link = "intra";
  } else if (g.per_node() == 1) {
    const LinkProfile& l = need(m.inter, "inter", g, m);
    alpha_s = steps * l.alpha_us * 1e-6, gbps = busbw_gbps(l, c), out.link = "inter";
  } else if (m.span.known() && g.per_node() == m.machine.ranks_per_node) {
    alpha_s = steps * m.span.alpha_us * 1e-6, gbps = busbw_gbps(m.span, c), out.link = "span";
  } else {
    const LinkProfile& a = need(m.intra, "intra", g, m);
    const LinkProfile& e = need(m.inter, "inter", g, m);
    alpha_s = ((steps - inter_steps) * a.alpha_us + inter_steps * e.alpha_us) * 1e-6;
    gbps = std::min(busbw_gbps(a, c), g.per_node() * busbw_gbps(e, c));
    out.link = "intra+inter";
  }
  out.seconds = alpha_s + double(bytes) * busbw_factor(c, g.ranks) / (gbps * 1e9);
  return out;
}

}  // namespace wmtp
