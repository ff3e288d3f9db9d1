// calibrate-machine: measure the figures of a machine profile (matmul rate, memory bandwidth, each
// link class's latency and bus bandwidths, the overlap of communication and compute) on the nodes a
// job will use, in under two minutes, and write the profile that `[runtime] machine_profile` names
// for --dry-run's time plan. Thin main over plan/calibration.h.
#include <sys/utsname.h>

#include <ctime>

#include "app/program.h"
#include "comm/agree.h"
#include "comm/runtime.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/output_path.h"
#include "plan/calibration.h"

namespace po = boost::program_options;

namespace {

template <class E>
E parse_choice(const std::string& flag, const std::string& value, const std::vector<std::string>& names) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == value) return E(i);
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
  wmtp::throw_usage(flag, " '", value, "': expected one of ", all);
}

std::string load_average() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) != 3) return "unknown";
  char buf[64];
  snprintf(buf, sizeof(buf), "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"calibrate-machine",
                      "Measure, with the ranks and nodes of this launch, what --dry-run's time plan divides by: the "
                      "sustained matmul rate per rank (every rank computing at once), the memory bandwidth of the "
                      "optimizer's pass, and per link class (intra: ranks of one node; inter: one rank per node, "
                      "every rank of a node crossing at once; span: every rank of several nodes) the latency of a "
                      "ring step and the nccl-tests bus bandwidths of all-gather, reduce-scatter and all-reduce "
                      "through the run's communicator (MPI, or NCCL on GPUs), and the share of a collective that "
                      "progresses while the ranks compute. Takes well under two minutes; rank 0 writes a small TOML "
                      "profile for [runtime] machine_profile.",
                      "srun -N 2 --ntasks-per-node 8 --mpi=pmix bin/calibrate-machine --device cuda --output "
                      "my-cluster.toml"});
  std::string output, name, device = "auto", communicator = "auto", dtypes;
  int64_t matmul_size = 0, max_message_mib = 0;
  double sample_seconds = 0.3;
  // One option per line:
  // clang-format off
  prog.options().add_options()
    ("output,o", po::value<std::string>(&output), "the profile to write (TOML)")
    ("name", po::value<std::string>(&name), "[machine] name in the profile (default: <host>-<nodes>x<ranks per node>)")
    ("device", po::value<std::string>(&device)->default_value(device), "auto | cpu | cuda, as [runtime] device")
    ("communicator", po::value<std::string>(&communicator)->default_value(communicator),
     "auto | nccl | staged | mpi, as [runtime] communicator")
    ("dtypes", po::value<std::string>(&dtypes),
     "compute dtypes to time: bf16,fp32 (default: both on a GPU; fp32 on a CPU, where bf16 matmuls are slow)")
    ("matmul-size", po::value<int64_t>(&matmul_size)->default_value(0), "square matmul size (0: CPU 2048, GPU 8192)")
    ("max-message-mib", po::value<int64_t>(&max_message_mib)->default_value(0),
     "largest message a bandwidth sample may grow to, MiB (0: CPU 64, GPU 1024)")
    ("sample-seconds", po::value<double>(&sample_seconds)->default_value(sample_seconds),
     "the larger of a collective's two sizes grows until one takes this long");
  // clang-format on
  prog.help_epilog(
      "Run it as the job will run: the same nodes, ranks per node, device and communicator (a profile\n"
      "measured with one rank per node has no intra-node figures). Then set [runtime] machine_profile to\n"
      "the file; configs/machines/ holds profiles built from published figures. See docs/slurm.md.\n");
  return prog.run([&](wmtp::ProgramContext& ctx) -> int {
    if (output.empty()) wmtp::throw_usage("--output: where to write the profile is required");
    if (!(sample_seconds > 0 && sample_seconds <= 10))
      wmtp::throw_usage("--sample-seconds ", sample_seconds, ": expected (0, 10]");
    if (matmul_size < 0 || max_message_mib < 0) wmtp::throw_usage("--matmul-size and --max-message-mib must be >= 0");
    wmtp::RuntimeConfig rc;
    rc.device = parse_choice<wmtp::RuntimeDevice>("--device", device, {"auto", "cpu", "cuda"});
    rc.communicator = parse_choice<wmtp::CommunicatorKind>("--communicator", communicator,
                                                           {"auto", "nccl", "staged", "mpi"});
    wmtp::on_rank0(ctx.mpi.world(), [&] { wmtp::check_output_file(output, "--output"); });
    wmtp::Runtime rt = wmtp::make_runtime(ctx.mpi, rc);

    wmtp::CalibrationOptions o;
    const bool gpu = !rt.device.is_cpu();
    if (dtypes.empty()) dtypes = gpu ? "bf16,fp32" : "fp32";
    o.bf16 = dtypes.find("bf16") != std::string::npos;
    o.fp32 = dtypes.find("fp32") != std::string::npos;
    if (!o.bf16 && !o.fp32) wmtp::throw_usage("--dtypes '", dtypes, "': expected bf16, fp32 or both");
    o.matmul_size = matmul_size;
    o.max_message_bytes = max_message_mib << 20;
    o.sample_seconds = sample_seconds;
    o.name = name.empty() ? ctx.mpi.host() + "-" + std::to_string(ctx.mpi.node_count()) + "x" +
                                std::to_string(ctx.mpi.local_size())
                          : name;
    std::string cmd;
    for (int i = 0; i < argc; ++i) {
      if (i) cmd += ' ';
      cmd += argv[i];
    }
    o.source = "calibrate-machine, " + std::to_string(ctx.mpi.world_size()) + " rank(s): " + cmd;

    const wmtp::Calibration c = wmtp::calibrate_machine(ctx.mpi, rt, o, [&](const std::string& what) {
      ctx.log.info("calibrate-machine: measuring %s", what.c_str());
    });
    wmtp::on_rank0(ctx.mpi.world(), [&] {
      const std::time_t now = std::time(nullptr);
      char date[64];
      std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M %Z", std::localtime(&now));
      const std::string header =
          "# Machine profile for wmtp's --dry-run time plan ([runtime] machine_profile),\n"
          "# measured by bin/calibrate-machine on " +
          std::string(date) + ", load average " + load_average() + " on rank 0's host (" + ctx.mpi.host() + ").\n" +
          c.log;
      wmtp::write_file_atomically(output, wmtp::machine_profile_toml(c.profile, header));
    });
    ctx.log.info("calibrate-machine: %s written in %.1f s (matmul %.4g TFLOP/s bf16, %.4g fp32; overlap %.2f)",
                 output.c_str(), c.seconds, c.profile.compute.matmul_tflops_bf16, c.profile.compute.matmul_tflops_fp32,
                 c.profile.compute.overlap);
    return 0;
  });
}
