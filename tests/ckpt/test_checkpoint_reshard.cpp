// Save at N ranks, load at M ranks (MPI tier; run with mpirun -np 1..4): every tensor and optimizer
// moment comes back bitwise identical whatever the piece partitions at save and load (engine-like
// padded flat layout, uneven per-tensor cuts, interleaved multi-piece ranges). Expected values are
// computed locally from (name, flat index), so no rank is a reference.
#include <gtest/gtest.h>

#include <fstream>

#include "ckpt/checkpoint.h"
#include "ckpt/flat_range.h"
#include "core/check.h"
#include "core/error.h"
#include "core/h5.h"
#include "comm/mpi_util.h"
#include "ckpt_test_util.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

const uint64_t kModelSalt = 1, kExpAvgSalt = 2, kExpAvgSqSalt = 3;

std::vector<TensorSpec> model_specs() {
  return {{"tok_embeddings.weight", {11, 8}},
          {"layers.0.attention.wq.weight", {8, 8}},
          {"layers.0.attention_norm.weight", {8}},
          {"layers.0.feed_forward.w1.weight", {3, 4, 6}},
          {"step_scale", {}},
          {"four_d", {2, 3, 4, 5}},
          {"empty", {0, 3}},
          {"output.weight", {11, 8}}};
}
std::vector<TensorSpec> optim_specs() {
  auto s = model_specs();
  s.erase(s.begin() + 2);  // a frozen parameter has no moments
  return s;
}

MPI_Comm first_ranks(int n) {
  MPI_Comm c = MPI_COMM_NULL;
  const int rank = mpi().rank();
  MPI_Comm_split(mpi().world(), rank < n ? 0 : MPI_UNDEFINED, rank, &c);
  return c;
}

TrainState sample_train_state() {
  TrainState st;
  st.set_int("step", 42);
  st.set_int("consumed_samples", 1344);
  st.set_double("lr_schedule.last_lr", 3.5e-5);
  st.set_string("data.cursor_desc", "epoch 1, block 42");
  st.set_ints("data.cursor", {1, 42, 7});
  st.set_doubles("td_ema.stats", {0.125, 1.5, -2.25});
  st.set_bytes("rng.cpu_state", {0, 1, 2, 255, 128});
  st.set_ints("empty_list", {});
  return st;
}

void save(const std::string& path, MPI_Comm comm, StoreDtype dtype) {
  const int rank = comm_rank(comm), world = comm_size(comm);
  CheckpointWriter w(path, comm, {CheckpointKind::Full, "", 42});
  auto ms = model_specs(), os = optim_specs();
  w.write_tensors(kModelGroup, ms, make_pieces(ms, owned_ranges(ms, Layout::Engine, rank, world), kModelSalt), dtype);
  w.write_tensors(kExpAvgGroup, os, make_pieces(os, owned_ranges(os, Layout::Engine, rank, world), kExpAvgSalt));
  w.write_tensors(kExpAvgSqGroup, os, make_pieces(os, owned_ranges(os, Layout::Engine, rank, world), kExpAvgSqSalt));
  w.write_optimizer_step(41);
  // Only rank 0's state and config count: other ranks pass something else on purpose.
  w.write_train_state(rank == 0 ? sample_train_state() : TrainState());
  w.write_config_toml(rank == 0 ? "[training]\nlr = 3e-5\n" : "ignored");
  w.write_lora_record(rank == 0 ? LoraRecord{8, 16.0, 0.05, {"wq", "wv"}, "base.h5", "fnv1a64:0123"} : LoraRecord{});
  w.close();
}

// Reads `group` at this communicator under `layout` and compares with the pattern (bf16-rounded
// when the file holds bf16). Returns the number of mismatching tensors.
int check_group(const CheckpointReader& r, const char* group, const std::vector<TensorSpec>& specs, uint64_t salt,
                Layout layout, MPI_Comm comm, bool bf16) {
  at::Tensor buffer;
  auto ranges = owned_ranges(specs, layout, comm_rank(comm), comm_size(comm));
  auto pieces = make_empty_pieces(specs, ranges, buffer);
  r.read_tensors(group, specs, pieces);
  int bad = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    at::Tensor want = pattern_values(pieces[i].name, ranges[i].begin, ranges[i].end, salt);
    if (bf16) want = want.to(at::kBFloat16).to(at::kFloat);
    if (!bitwise_equal(pieces[i].data, want)) {
      ADD_FAILURE() << group << "/" << pieces[i].name << " [" << ranges[i].begin << ", " << ranges[i].end
                    << ") differs (layout " << layout_name(layout) << ")";
      ++bad;
    }
  }
  return bad;
}

TEST(CheckpointReshard, SaveAtNLoadAtMBitwise) {
  const int world = mpi().world_size();
  const std::string dir = shared_scratch_dir("ckpt_reshard_w" + std::to_string(world), mpi().world());
  for (int n : {1, 2, 4}) {
    if (n > world) continue;
    const std::string path = dir + "/saved_at_" + std::to_string(n) + ".h5";
    if (MPI_Comm c = first_ranks(n); c != MPI_COMM_NULL) {
      save(path, c, StoreDtype::Float32);
      MPI_Comm_free(&c);
    }
    MPI_Barrier(mpi().world());
    for (int m = 1; m <= world; ++m) {
      MPI_Comm c = first_ranks(m);
      if (c == MPI_COMM_NULL) continue;
      for (ReadMode mode : {ReadMode::Independent, ReadMode::Collective}) {
        SCOPED_TRACE("saved at " + std::to_string(n) + ", loaded at " + std::to_string(m) +
                     (mode == ReadMode::Collective ? " (collective reads)" : " (independent reads)"));
        CheckpointReader r(path, c, {mode});
        EXPECT_EQ(r.header().world_size, n);
        EXPECT_EQ(r.header().step, 42);
        EXPECT_EQ(r.header().kind, CheckpointKind::Full);
        EXPECT_TRUE(r.header().has_optimizer);
        EXPECT_EQ(r.header().optimizer_step, 41);
        for (Layout layout :
             {Layout::Engine, Layout::Uneven, Layout::Interleaved, Layout::Replicated, Layout::Partial}) {
          EXPECT_EQ(check_group(r, kModelGroup, model_specs(), kModelSalt, layout, c, false), 0);
          EXPECT_EQ(check_group(r, kExpAvgGroup, optim_specs(), kExpAvgSalt, layout, c, false), 0);
          EXPECT_EQ(check_group(r, kExpAvgSqGroup, optim_specs(), kExpAvgSqSalt, layout, c, false), 0);
        }
        // Whole tensors, shaped.
        for (const auto& spec : model_specs())
          EXPECT_TRUE(bitwise_equal(r.read_tensor(kModelGroup, spec.name), pattern_tensor(spec, kModelSalt)))
              << spec.name;
        EXPECT_EQ(r.read_train_state(), sample_train_state());
        EXPECT_EQ(r.read_config_toml().value_or(""), "[training]\nlr = 3e-5\n");
        auto lora = r.read_lora_record();
        EXPECT_EQ(lora.value_or(LoraRecord{}), (LoraRecord{8, 16.0, 0.05, {"wq", "wv"}, "base.h5", "fnv1a64:0123"}));
        const ChecksumReport rep = r.verify_checksums();
        EXPECT_TRUE(rep.mismatched.empty());
        EXPECT_EQ(rep.tensors, int64_t(model_specs().size() + 2 * optim_specs().size()));
        EXPECT_EQ(r.tensor_names(kModelGroup).size(), model_specs().size());
        EXPECT_EQ(r.tensor_names(kModelGroup).front(), "tok_embeddings.weight");  // write order kept
      }
      MPI_Comm_free(&c);
    }
  }
}

TEST(CheckpointReshard, Bf16StorageRoundsOnceAndReadsBackExactly) {
  const int world = mpi().world_size();
  const std::string dir = shared_scratch_dir("ckpt_bf16_w" + std::to_string(world), mpi().world());
  const std::string path = dir + "/bf16.h5";
  save(path, mpi().world(), StoreDtype::BFloat16);
  CheckpointReader r(path, mpi().world());
  EXPECT_EQ(r.tensor_dtype(kModelGroup, "output.weight"), "bfloat16");
  EXPECT_EQ(r.tensor_dtype(kExpAvgGroup, "output.weight"), "float32");
  for (Layout layout : {Layout::Engine, Layout::Interleaved})
    EXPECT_EQ(check_group(r, kModelGroup, model_specs(), kModelSalt, layout, mpi().world(), true), 0);
  at::Tensor stored = r.read_tensor_stored(kModelGroup, "output.weight");
  EXPECT_EQ(stored.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(r.verify_checksums().mismatched.empty());
}

// Flips one bit of element `index` of /model/<name> in place (rank 0 only; callers barrier).
void flip_bit(const std::string& path, const std::string& name, int64_t index) {
  haddr_t offset;
  {
    H5Handle f = h5::open_file(path, MPI_COMM_NULL);
    H5Handle d(WMTP_H5_CHECK(H5Dopen2(f, (std::string(kModelGroup) + "/" + name).c_str(), H5P_DEFAULT)));
    offset = H5Dget_offset(d);
  }
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  const std::streamoff at = std::streamoff(offset + 4 * uint64_t(index) + 1);
  char c = 0;
  io.seekg(at);
  io.read(&c, 1);
  c ^= 0x04;
  io.seekp(at);
  io.write(&c, 1);
}

// Verification on read: a flipped bit in a tensor is an agreed input error on every rank, whatever
// the ranks read — disjoint engine pieces, overlapping replicas (no_shard), or only half of each
// tensor (the other half, where the second flip is, is read once more just to check it) — with
// independent and collective reads. Without verification the same read passes silently.
TEST(CheckpointReshard, CorruptDataFailsTheReadOnEveryRank) {
  const int world = mpi().world_size();
  MPI_Comm comm = mpi().world();
  const std::string dir = shared_scratch_dir("ckpt_corrupt_w" + std::to_string(world), comm);
  const std::string path = dir + "/corrupt.h5";
  save(path, comm, StoreDtype::Float32);
  if (mpi().rank() == 0) {
    flip_bit(path, "layers.0.attention.wq.weight", 9);  // in the first half
    flip_bit(path, "output.weight", 80);                // in the second half: Partial reads miss it
  }
  MPI_Barrier(comm);
  for (ReadMode mode : {ReadMode::Independent, ReadMode::Collective}) {
    for (Layout layout : {Layout::Engine, Layout::Uneven, Layout::Interleaved, Layout::Replicated, Layout::Partial}) {
      SCOPED_TRACE(std::string(layout_name(layout)) +
                   (mode == ReadMode::Collective ? ", collective" : ", independent"));
      CheckpointReader r(path, comm, {mode});
      std::string what;
      try {
        at::Tensor buffer;
        auto pieces = make_empty_pieces(model_specs(), owned_ranges(model_specs(), layout, mpi().rank(), world),
                                        buffer);
        r.read_tensors(kModelGroup, model_specs(), pieces);
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Input);
        EXPECT_TRUE(e.agreed());
        what = e.what();
      }
      EXPECT_NE(what.find("corrupt.h5"), std::string::npos) << what;
      EXPECT_NE(what.find("/model/layers.0.attention.wq.weight"), std::string::npos) << what;
      EXPECT_NE(what.find("/model/output.weight"), std::string::npos) << what;
      EXPECT_EQ(what.find("attention_norm"), std::string::npos) << what;  // intact tensors are not named
      // The moments are intact: they verify.
      EXPECT_EQ(check_group(r, kExpAvgGroup, optim_specs(), kExpAvgSalt, layout, comm, false), 0);
    }
  }
  // Without verification the corrupt values come through unnoticed (what verification is for).
  CheckpointReader unchecked(path, comm, {ReadMode::Independent, /*verify=*/false});
  at::Tensor buffer;
  auto pieces = make_empty_pieces(model_specs(), owned_ranges(model_specs(), Layout::Replicated, mpi().rank(), world),
                                  buffer);
  EXPECT_NO_THROW(unchecked.read_tensors(kModelGroup, model_specs(), pieces));
  EXPECT_EQ(unchecked.verify_checksums().mismatched,
            (std::vector<std::string>{"model/layers.0.attention.wq.weight", "model/output.weight"}));
  EXPECT_THROW(CheckpointReader(path, comm).read_tensor(kModelGroup, "output.weight"), Error);
}

// A LoRA run saves only its trainable tensors (+ their moments) with the base's fingerprint; the
// adapter file loads at any layout and accepts only the base it was trained on.
TEST(CheckpointReshard, LoraOnlyCheckpointRecordsItsBase) {
  const int world = mpi().world_size(), rank = mpi().rank();
  MPI_Comm comm = mpi().world();
  const std::string dir = shared_scratch_dir("ckpt_lora_only_w" + std::to_string(world), comm);
  auto base_specs = model_specs();
  auto write_base = [&](const std::string& path, uint64_t salt) {
    CheckpointWriter w(path, comm, {CheckpointKind::Model, "", 0});
    w.write_tensors(kModelGroup, base_specs,
                    make_pieces(base_specs, owned_ranges(base_specs, Layout::Engine, rank, world), salt));
    w.close();
  };
  write_base(dir + "/base.h5", kModelSalt);
  write_base(dir + "/other_base.h5", 99);
  const std::vector<TensorSpec> trainable = {{"layers.0.attention.wq.lora_A", {2, 8}},
                                             {"layers.0.attention.wq.lora_B", {8, 2}},
                                             {"value_head.linear.weight", {1, 8}}};
  LoraRecord info{2, 4.0, 0.1, {"wq"}, dir + "/base.h5", ""};
  {
    CheckpointReader base(dir + "/base.h5", comm);
    info.base_fingerprint = model_fingerprint(base);
  }
  {
    CheckpointWriter w(dir + "/adapter.h5", comm, {CheckpointKind::Lora, "", 9});
    auto own = owned_ranges(trainable, Layout::Engine, rank, world);
    w.write_tensors(kModelGroup, trainable, make_pieces(trainable, own, kModelSalt));
    w.write_tensors(kExpAvgGroup, trainable, make_pieces(trainable, own, kExpAvgSalt));
    w.write_tensors(kExpAvgSqGroup, trainable, make_pieces(trainable, own, kExpAvgSqSalt));
    w.write_optimizer_step(9);
    w.write_lora_record(info);
    w.close();
  }
  CheckpointReader r(dir + "/adapter.h5", comm);
  EXPECT_EQ(r.header().kind, CheckpointKind::Lora);
  EXPECT_EQ(r.tensor_names(kModelGroup).size(), 3u);
  for (Layout layout : {Layout::Uneven, Layout::Interleaved}) {
    EXPECT_EQ(check_group(r, kModelGroup, trainable, kModelSalt, layout, comm, false), 0);
    EXPECT_EQ(check_group(r, kExpAvgSqGroup, trainable, kExpAvgSqSalt, layout, comm, false), 0);
  }
  const LoraRecord li = r.read_lora_record().value_or(LoraRecord{});  // EXPECTs only: no early return in MPI tests
  EXPECT_EQ(li, info);
  EXPECT_NO_THROW(check_lora_base(li, CheckpointReader(dir + "/base.h5", comm)));
  try {
    check_lora_base(li, CheckpointReader(dir + "/other_base.h5", comm));
    ADD_FAILURE() << "another base was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("other_base.h5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wmtp::test
