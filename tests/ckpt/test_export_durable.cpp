// Every file convert-checkpoint and merge-lora write is durable and leaves nothing behind on failure:
//  - under an LD_PRELOAD shim that logs fsync() and rename() (fsync_trace.c), every rename of a
//    `.tmp` onto its final name comes after an fsync of the `.tmp` and before an fsync of its
//    directory — so a power loss after "written" cannot leave an empty or partial file under the
//    final name (HF export with its config.json and MTP sidecar, a critic's value-head files, a
//    sharded export with its index, PEFT adapters, merge-lora to HDF5 and to safetensors, import);
//  - on a full disk (a tmpfs resized to half what the output needs, and to one page short, where
//    only config.json does not fit) the HF, critic and PEFT exports and both merge-lora outputs fail
//    with exit 1 naming the disk, and the output directory holds exactly what it held before: an
//    unrelated file stays, a directory the program created is gone, no `.tmp`. Needs
//    `mount -t tmpfs` (root): fails, never skips, without it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "ckpt/model_file.h"
#include "ckpt/weight_import.h"
#include "core/error.h"
#include "model/model_args.h"
#include "model/mtp.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

namespace fs = std::filesystem;

ModelArgs small_args(int64_t n_future) {
  ModelArgs a;
  a.dim = 32;
  a.n_layers = 2 + n_future;  // one trunk block + a block per head
  a.n_heads = 4;
  a.n_kv_heads = 2;
  a.vocab_size = 40;
  a.multiple_of = 16;
  a.n_future_tokens = n_future;
  a.max_seq_len = 64;
  return a;
}

void write_file(const std::string& path, const std::vector<TensorSpec>& specs, const ModelArgs& args,
                ModelFileOptions mo = {}) {
  at::manual_seed(3);
  std::map<std::string, at::Tensor> t;
  for (const auto& s : specs) t[s.name] = at::randn(s.shape) * 0.1;
  write_model_file(
      path, MPI_COMM_NULL, model_args_json_text(args), specs, [&](const std::string& n) { return t.at(n); }, mo);
}

struct Inputs {
  std::string dir, model, lora, critic, meta_dir;
};

// An MTP model, LoRA adapters on it (kind "lora", with the base's fingerprint) and a critic (value
// model with a value head and /value_head).
const Inputs& inputs() {
  static Inputs in = [] {
    Inputs i;
    i.dir = scratch_dir("export_durable_inputs");
    const ModelArgs mtp = small_args(2);
    i.model = i.dir + "/model.h5";
    write_file(i.model, base_model_specs(mtp), mtp);
    LoraConfig lc;
    lc.enabled = true;
    lc.rank = 2;
    lc.targets = {"wq", "wv"};
    std::vector<TensorSpec> adapters;
    for (const auto& s : MtpModel(mtp, lc).param_specs())
      if (s.fqn.find(".lora_") != std::string::npos) adapters.push_back({s.fqn, s.shape});
    ModelFileOptions lo;
    lo.kind = CheckpointKind::Lora;
    lo.lora = LoraRecord{2,       4.0,
                         0.0,     {"wq", "wv"},
                         i.model, model_fingerprint(CheckpointReader(i.model, MPI_COMM_NULL))};
    i.lora = i.dir + "/lora.h5";
    write_file(i.lora, adapters, mtp, lo);
    const ModelArgs one = small_args(1);
    ValueHeadConfig vh;
    vh.enabled = true;
    vh.type = ValueHeadType::Linear;
    std::vector<TensorSpec> critic;
    for (const auto& s : MtpModel(one, {}, vh).param_specs()) critic.push_back({s.fqn, s.shape});
    ModelFileOptions co;
    co.value_head = ValueHeadRecord{ValueHeadType::Linear, one.dim, 0.0, 0.5};
    i.critic = i.dir + "/critic.h5";
    write_file(i.critic, critic, one, co);
    i.meta_dir = i.dir + "/meta";
    const CommandResult r = run_command(bin("convert-checkpoint") + " export --input " + i.model + " --output " +
                                        i.meta_dir);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return i;
  }();
  return in;
}

// One program run that writes an output `out` (a directory or a file) somewhere under a directory.
struct Job {
  std::string name;
  std::function<std::string(const std::string& out)> command;
  bool out_is_dir = true;
  bool full_disk = true;  // also run on a full disk (each run costs a program start)
};

std::vector<Job> jobs() {
  const Inputs& in = inputs();
  const std::string cc = bin("convert-checkpoint"), ml = bin("merge-lora");
  return {
      {"export hf",
       [=](const std::string& o) { return cc + " export --input " + in.model + " --output " + o + " --names hf"; }},
      {"export critic", [=](const std::string& o) { return cc + " export --input " + in.critic + " --output " + o; }},
      {"export shards",
       [=](const std::string& o) {
         return cc + " export --input " + in.model + " --output " + o + " --max-shard-size 20KB";
       },
       true, false},
      {"export peft",
       [=](const std::string& o) { return cc + " export --input " + in.lora + " --output " + o + " --format peft"; }},
      {"merge-lora hf",
       [=](const std::string& o) {
         return ml + " --base " + in.model + " --lora " + in.lora + " --output " + o + " --output-format hf";
       }},
      {"merge-lora h5",
       [=](const std::string& o) { return ml + " --base " + in.model + " --lora " + in.lora + " --output " + o; },
       false},
      {"import meta",
       [=](const std::string& o) { return cc + " import --from meta --input " + in.meta_dir + " --output " + o; },
       false, false},
  };
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

TEST(ExportDurable, EveryRenameFollowsAnFsyncOfTheFileAndPrecedesOneOfItsDirectory) {
  const std::string dir = scratch_dir("export_durable_trace");
  const std::string shim = std::string(WMTP_FSYNC_TRACE_LIB);
  ASSERT_TRUE(fs::exists(shim)) << shim;
  for (const Job& job : jobs()) {
    const std::string trace = dir + "/" + std::to_string(std::hash<std::string>{}(job.name)) + ".trace";
    const std::string out = fs::canonical(dir).string() + "/" + std::to_string(std::hash<std::string>{}(job.name)) +
                            (job.out_is_dir ? "" : ".h5");
    const CommandResult r = run_command("WMTP_FSYNC_TRACE=" + trace + " LD_PRELOAD=" + shim + " " + job.command(out));
    ASSERT_EQ(r.exit_code, 0) << job.name << ": " << r.output;
    const std::vector<std::string> log = lines_of(trace);
    int renames = 0;
    for (size_t i = 0; i < log.size(); ++i) {
      std::istringstream ls(log[i]);
      std::string kind, from, to;
      ls >> kind >> from >> to;
      if (kind != "rename" || from != to + ".tmp" || to.rfind(out, 0) != 0) continue;
      ++renames;
      const std::string parent = fs::path(to).parent_path().string();
      const bool synced_before = std::find(log.begin(), log.begin() + long(i), "fsync " + from) !=
                                 log.begin() + long(i);
      const bool dir_after = std::find(log.begin() + long(i), log.end(), "fsync " + parent) != log.end();
      EXPECT_TRUE(synced_before) << job.name << ": " << to << " was renamed into place before its bytes were fsync'ed";
      EXPECT_TRUE(dir_after) << job.name << ": the rename of " << to << " was not made durable (no fsync of " << parent
                             << " after it)";
    }
    // Every output file arrives by such a rename (none written in place).
    int files = 0;
    if (job.out_is_dir) {
      for (const auto& e : fs::directory_iterator(out)) files += e.is_regular_file();
    } else {
      files = 1;
    }
    EXPECT_EQ(renames, files) << job.name << ": " << files << " output file(s), " << renames
                              << " committed through a .tmp; trace:\n"
                              << r.output;
  }
}

// A tmpfs at `mnt`, resized per run; unmounted at the end.
class Tmpfs {
 public:
  explicit Tmpfs(std::string mnt) : mnt_(std::move(mnt)) {
    run_command("umount " + mnt_);
    fs::create_directories(mnt_);
    const CommandResult r = run_command("mount -t tmpfs -o size=4m tmpfs " + mnt_);
    mounted_ = r.exit_code == 0;
    EXPECT_TRUE(mounted_) << "cannot mount a tmpfs on " << mnt_ << " (this test needs root): " << r.output;
  }
  ~Tmpfs() {
    if (mounted_) run_command("umount " + mnt_);
  }
  bool mounted() const { return mounted_; }
  bool resize(int64_t pages) {
    const CommandResult r = run_command("mount -o remount,size=" + std::to_string(pages * 4) + "k " + mnt_);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.exit_code == 0;
  }

 private:
  std::string mnt_;
  bool mounted_ = false;
};

std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); ++it)
    out.insert(fs::relative(it->path(), dir).string());
  return out;
}

int64_t pages_used(const std::string& dir) {
  int64_t pages = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    if (e.is_regular_file() && ::stat(e.path().c_str(), &st) == 0) pages += (int64_t(st.st_blocks) * 512 + 4095) / 4096;
  }
  return pages;
}

TEST(ExportDurable, AFullDiskLeavesOnlyWhatWasThereBefore) {
  const std::string base = scratch_dir("export_durable_full");
  Tmpfs tmpfs(base + "/mnt");
  ASSERT_TRUE(tmpfs.mounted());
  const std::string mnt = base + "/mnt";
  int config_failures = 0;
  for (const Job& job : jobs()) {
    if (!job.full_disk) continue;
    // What the output needs, measured on the same file system.
    ASSERT_TRUE(tmpfs.resize(1024));
    const std::string probe = mnt + "/probe" + (job.out_is_dir ? "" : ".h5");
    CommandResult ok = run_command(job.command(probe));
    ASSERT_EQ(ok.exit_code, 0) << job.name << ": " << ok.output;
    const int64_t need = pages_used(mnt);
    fs::remove_all(probe);
    ASSERT_GT(need, 2) << job.name;
    // One page short (only the last small file, e.g. config.json, does not fit) into a new and into
    // an existing directory, and half the need (a weights file does not fit).
    const std::pair<int64_t, bool> cases[] = {{need - 1, false}, {need - 1, true}, {need / 2, false}};
    for (const auto& [pages, existed] : cases) {
      fs::remove_all(mnt + "/out");
      fs::remove_all(mnt + "/out.h5");
      ASSERT_TRUE(tmpfs.resize(1024));
      // An existing output directory with an unrelated file (an empty one for .h5 outputs), or none.
      if (existed) {
        fs::create_directories(mnt + "/keep");
        std::ofstream(mnt + "/keep/notes.txt") << "mine\n";
      }
      const std::string out = job.out_is_dir ? (existed ? mnt + "/keep" : mnt + "/out") : mnt + "/out.h5";
      const std::set<std::string> before = listing(mnt);
      ASSERT_TRUE(tmpfs.resize(pages + (existed ? 1 : 0)));  // the kept file has its page
      const CommandResult r = run_command(job.command(out));
      const std::set<std::string> after = listing(mnt);
      const std::string what = job.name + " on " + std::to_string(pages) + " of " + std::to_string(need) + " pages" +
                               (existed ? " (output directory existed)" : "");
      EXPECT_EQ(r.exit_code, 1) << what << ": " << r.output;
      EXPECT_TRUE(r.output.find("No space left on device") != std::string::npos ||
                  r.output.find("not enough for") != std::string::npos)  // HDF5's reservation says so first
          << what << ": " << r.output;
      EXPECT_EQ(after, before) << what << ": left behind what was not there before; " << r.output;
      if (r.output.find("config.json") != std::string::npos) ++config_failures;
      fs::remove_all(mnt + "/keep");
    }
  }
  // The case of the report: the weights fit, config.json does not.
  EXPECT_GT(config_failures, 0) << "no size made the HF config.json the file that did not fit";
}

}  // namespace
}  // namespace wmtp::test
