// Reading, checking and writing machine profiles (TOML through core/config.h's ConfigSet, so unknown
// keys name the nearest valid one and a syntax error names file:line:column).
#include "plan/machine_profile.h"

#include <cmath>
#include <filesystem>
#include <sstream>

#include "core/config.h"
#include "core/error.h"

namespace wmtp {

namespace {

// The sections of a profile file, in the order they are written.
void register_sections(ConfigSet& set, MachineProfile& p) {
  set.add("machine", p.machine);
  set.add("compute", p.compute);
  set.add("intra", p.intra);
  set.add("inter", p.inter);
  set.add("span", p.span);
}

void check_link(const LinkProfile& l, const std::string& section, const std::string& what) {
  const double values[] = {l.alpha_us, l.all_gather_busbw_gbps, l.reduce_scatter_busbw_gbps, l.all_reduce_busbw_gbps};
  for (double v : values)
    if (!(v >= 0) || !std::isfinite(v))
      throw_usage(what, ": [", section, "] holds ", v, ": latencies and bandwidths must be finite and >= 0");
}

}  // namespace

double MachineProfile::matmul_flops(int dtype_bytes) const {
  return (dtype_bytes == 2 ? compute.matmul_tflops_bf16 : compute.matmul_tflops_fp32) * 1e12;
}

void check_machine_profile(const MachineProfile& p, const std::string& what) {
  if (p.machine.ranks_per_node < 1)
    throw_usage(what, ": [machine] ranks_per_node = ", p.machine.ranks_per_node,
                ": expected the ranks of a node, >= 1");
  const ComputeProfile& c = p.compute;
  for (double v : {c.matmul_tflops_bf16, c.matmul_tflops_fp32, c.memory_gbps})
    if (!(v >= 0) || !std::isfinite(v)) throw_usage(what, ": [compute] holds ", v, ": rates must be finite and >= 0");
  if (c.matmul_tflops_bf16 <= 0 && c.matmul_tflops_fp32 <= 0)
    throw_usage(what, ": [compute] gives no matmul rate (matmul_tflops_bf16 or matmul_tflops_fp32)");
  if (c.memory_gbps <= 0) throw_usage(what, ": [compute] memory_gbps must be > 0");
  if (!(c.overlap >= 0 && c.overlap <= 1))
    throw_usage(what, ": [compute] overlap = ", c.overlap, ": expected a share in [0, 1]");
  check_link(p.intra, "intra", what);
  check_link(p.inter, "inter", what);
  check_link(p.span, "span", what);
}

MachineProfile load_machine_profile(const std::string& path, const std::string& what) {
  const std::string where = what + " '" + path + "'";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw_input(where, ": no such file (bin/calibrate-machine writes one; configs/machines/ holds published ones)");
  MachineProfile p;
  ConfigSet set;
  register_sections(set, p);
  try {
    set.load_file(path);
  } catch (const Error& e) {
    throw Error(e.kind(), where + ": " + e.what(), e.reach());
  }
  check_machine_profile(p, where);
  p.path = path;
  return p;
}

std::string machine_profile_toml(const MachineProfile& p, const std::string& header) {
  MachineProfile copy = p;  // ConfigSet binds to mutable fields
  ConfigSet set;
  register_sections(set, copy);
  std::ostringstream os;
  os << header;
  if (!header.empty() && header.back() != '\n') os << "\n";
  os << set.to_toml();
  return os.str();
}

}  // namespace wmtp
