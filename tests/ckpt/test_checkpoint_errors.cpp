// Checkpoint files that are wrong in every way a user meets: each is rejected with Error(Input)
// naming the file and the cause (missing, not HDF5, not ours, unsupported version, missing tensor,
// shape mismatch with both shapes, truncated, corrupted data caught by the checksums, a tensor without
// its checksum), and `h5ls -r` shows the named tree. One process, serial HDF5 (MPI_COMM_NULL) and
// MPI-IO (COMM_SELF).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ckpt/checkpoint.h"
#include "core/h5.h"
#include "ckpt_test_util.h"
#include "core/check.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

namespace fs = std::filesystem;

std::vector<TensorSpec> specs() { return {{"layers.0.attention.wq.weight", {8, 8}}, {"norm.weight", {8}}}; }

void write_small(const std::string& path, MPI_Comm comm = MPI_COMM_NULL) {
  CheckpointWriter w(path, comm, {CheckpointKind::Model, "", 7});
  std::vector<TensorPiece> pieces;
  for (const auto& s : specs()) pieces.push_back({s.name, 0, pattern_tensor(s, 1).reshape({-1})});
  w.write_tensors(kModelGroup, specs(), pieces);
  TrainState st;
  st.set_int("step", 7);
  w.write_train_state(st);
  w.close();
}

// Runs `fn`, expects Error(Input) whose message contains every fragment.
template <class Fn>
void expect_input_error(Fn fn, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
    for (const auto& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what() << "\n  lacks: " << f;
  }
}

void set_root_attr(const std::string& path, const std::string& name, const std::string& value) {
  H5Handle f = h5::open_file(path, MPI_COMM_NULL, /*writable=*/true);
  h5::write_attr(f, name, value);
}
void set_root_attr(const std::string& path, const std::string& name, int64_t value) {
  H5Handle f = h5::open_file(path, MPI_COMM_NULL, /*writable=*/true);
  h5::write_attr(f, name, value);
}

class CheckpointErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir("ckpt_errors");
    good_ = dir_ + "/good.h5";
    write_small(good_);
  }
  std::string copy_of_good(const std::string& name) {
    std::string p = dir_ + "/" + name;
    fs::copy_file(good_, p, fs::copy_options::overwrite_existing);
    return p;
  }
  std::string dir_, good_;
};

TEST_F(CheckpointErrors, GoodFileLoadsWithBothDrivers) {
  for (MPI_Comm comm : {MPI_COMM_NULL, MPI_COMM_SELF}) {
    CheckpointReader r(good_, comm);
    EXPECT_EQ(r.header().kind, CheckpointKind::Model);
    EXPECT_EQ(r.header().step, 7);
    EXPECT_EQ(r.header().version, 1);
    EXPECT_FALSE(r.header().has_optimizer);
    EXPECT_TRUE(bitwise_equal(r.read_tensor(kModelGroup, "norm.weight"), pattern_tensor(specs()[1], 1)));
    EXPECT_EQ(r.read_train_state().get_int("step"), 7);
    EXPECT_TRUE(r.verify_checksums().mismatched.empty());
    EXPECT_EQ(r.verify_checksums().tensors, 2);
  }
}

TEST_F(CheckpointErrors, MissingFile) {
  expect_input_error([&] { CheckpointReader(dir_ + "/nope.h5", MPI_COMM_SELF); }, {"nope.h5", "does not exist"});
}

TEST_F(CheckpointErrors, NotHdf5) {
  std::string p = dir_ + "/text.h5";
  std::ofstream(p) << "this is not a checkpoint\n";
  expect_input_error([&] { CheckpointReader(p, MPI_COMM_SELF); }, {"text.h5", "not a wmtp checkpoint"});
}

TEST_F(CheckpointErrors, ForeignHdf5) {
  std::string p = dir_ + "/foreign.h5";
  { H5Handle f = h5::create_file(p, MPI_COMM_NULL); }
  expect_input_error([&] { CheckpointReader(p, MPI_COMM_SELF); },
                     {"foreign.h5", "not a wmtp checkpoint", "no 'format'"});
  std::string q = copy_of_good("other_format.h5");
  set_root_attr(q, "format", std::string("keras"));
  expect_input_error([&] { CheckpointReader(q, MPI_COMM_NULL); }, {"other_format.h5", "format is 'keras'"});
}

TEST_F(CheckpointErrors, UnsupportedVersion) {
  std::string p = copy_of_good("v2.h5");
  set_root_attr(p, "version", int64_t(2));
  expect_input_error([&] { CheckpointReader(p, MPI_COMM_SELF); },
                     {"v2.h5", "unsupported format version 2", "reads version 1"});
}

// The kind is one of the names the writer spells: anything else is a file no reader can trust.
TEST_F(CheckpointErrors, UnknownKind) {
  std::string p = copy_of_good("kind.h5");
  set_root_attr(p, "kind", std::string("adapters"));
  expect_input_error([&] { CheckpointReader(p, MPI_COMM_SELF); }, {"kind.h5", "kind 'adapters'", "full, model, lora"});
  set_root_attr(p, "kind", std::string("lora"));
  EXPECT_EQ(CheckpointReader(p, MPI_COMM_SELF).header().kind, CheckpointKind::Lora);
}

TEST_F(CheckpointErrors, MissingTensorAndShapeMismatch) {
  CheckpointReader r(good_, MPI_COMM_SELF);
  at::Tensor buf = at::zeros({64});
  std::vector<TensorPiece> pieces = {{"layers.0.attention.wq.weight", 0, buf.narrow(0, 0, 32)}};
  expect_input_error(
      [&] {
        r.read_tensors(kModelGroup, {{"layers.0.attention.wq.weight", {4, 8}}}, pieces);
      },
      {"good.h5", "layers.0.attention.wq.weight", "[8, 8]", "[4, 8]"});
  std::vector<TensorPiece> none;
  expect_input_error(
      [&] {
        r.read_tensors(kModelGroup, {{"output.weight", {8, 8}}}, none);
      },
      {"good.h5", "no tensor /model/output.weight"});
  expect_input_error([&] { r.read_tensor(kExpAvgGroup, "norm.weight"); }, {"no tensor /optim/exp_avg/norm.weight"});
  expect_input_error([&] { r.read_train_state().get_int("consumed_samples"); },
                     {"/train has no key 'consumed_samples'"});
  expect_input_error([&] { r.read_train_state().get_string("step"); }, {"'step' holds int64"});
}

TEST_F(CheckpointErrors, TruncatedFiles) {
  const auto size = fs::file_size(good_);
  for (uintmax_t keep : {uintmax_t(40), size / 2, size - 1}) {
    std::string p = copy_of_good("truncated_" + std::to_string(keep) + ".h5");
    fs::resize_file(p, keep);
    SCOPED_TRACE(p);
    expect_input_error(
        [&] {
          CheckpointReader r(p, MPI_COMM_SELF);
          r.read_tensor(kModelGroup, "layers.0.attention.wq.weight");
        },
        {p});
  }
}

TEST_F(CheckpointErrors, CorruptedDataIsCaughtByChecksums) {
  std::string p = copy_of_good("flipped.h5");
  haddr_t offset;
  {
    H5Handle f = h5::open_file(p, MPI_COMM_NULL);
    H5Handle d(WMTP_H5_CHECK(H5Dopen2(f, "model/norm.weight", H5P_DEFAULT)));
    offset = H5Dget_offset(d);
  }
  {
    std::fstream io(p, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(std::streamoff(offset + 5));
    char c = 0;
    io.read(&c, 1);
    c ^= 0x10;
    io.seekp(std::streamoff(offset + 5));
    io.write(&c, 1);
  }
  CheckpointReader r(p, MPI_COMM_SELF, {ReadMode::Independent, /*verify=*/false});
  EXPECT_EQ(r.verify_checksums().mismatched, std::vector<std::string>{"model/norm.weight"});
  // Reading it is an error by default, naming the file and the tensor; the intact one reads.
  for (MPI_Comm comm : {MPI_COMM_NULL, MPI_COMM_SELF}) {
    CheckpointReader v(p, comm);
    expect_input_error([&] { v.read_tensor(kModelGroup, "norm.weight"); },
                       {"flipped.h5", "corrupt", "/model/norm.weight"});
    at::Tensor buf = at::zeros({8});
    std::vector<TensorPiece> pieces = {{"norm.weight", 2, buf.narrow(0, 2, 4)}};  // does not even cover the flip
    expect_input_error([&] { v.read_tensors(kModelGroup, {specs()[1]}, pieces); },
                       {"flipped.h5", "/model/norm.weight"});
    EXPECT_NO_THROW(v.read_tensor(kModelGroup, "layers.0.attention.wq.weight"));
  }
  EXPECT_NO_THROW(r.read_tensor(kModelGroup, "norm.weight"));  // unverified reads pass it silently
}

// A tensor whose checksum attribute is gone cannot be verified: a verifying read refuses it, naming
// the tensor; an unverified read still gets the data.
TEST_F(CheckpointErrors, TensorWithoutChecksumIsRefusedWhenVerifying) {
  std::string p = copy_of_good("no_checksum.h5");
  {
    H5Handle f = h5::open_file(p, MPI_COMM_NULL, /*writable=*/true);
    H5Handle d(WMTP_H5_CHECK(H5Dopen2(f, "model/norm.weight", H5P_DEFAULT)));
    WMTP_H5_CHECK(H5Adelete(d, "checksum"));
  }
  at::Tensor buf = at::zeros({8});
  std::vector<TensorPiece> pieces = {{"norm.weight", 0, buf}};
  for (MPI_Comm comm : {MPI_COMM_NULL, MPI_COMM_SELF}) {
    CheckpointReader v(p, comm);
    expect_input_error([&] { v.read_tensors(kModelGroup, {specs()[1]}, pieces); },
                       {"no_checksum.h5", "/model/norm.weight", "has no checksum attribute"});
    expect_input_error([&] { v.read_tensor(kModelGroup, "norm.weight"); },
                       {"no_checksum.h5", "/model/norm.weight", "has no checksum attribute"});
  }
  CheckpointReader r(p, MPI_COMM_SELF, {ReadMode::Independent, /*verify=*/false});
  r.read_tensors(kModelGroup, {specs()[1]}, pieces);
  EXPECT_TRUE(at::equal(buf, pattern_tensor(specs()[1], 1)));
}

// The /train values a resume depends on (step, data cursor, schedule) and the optimizer step are
// covered by checksums too: a changed /train/step is not resumed silently.
TEST_F(CheckpointErrors, CorruptTrainStateAndOptimizerStepAreCaught) {
  std::string p = copy_of_good("train_flipped.h5");
  {
    H5Handle f = h5::open_file(p, MPI_COMM_NULL, /*writable=*/true);
    H5Handle d(WMTP_H5_CHECK(H5Dopen2(f, "train/step", H5P_DEFAULT)));
    const int64_t step = 7 + 1024;  // one flipped bit
    WMTP_H5_CHECK(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &step));
  }
  CheckpointReader r(p, MPI_COMM_SELF);
  expect_input_error([&] { r.read_train_state(); }, {"train_flipped.h5", "corrupt", "/train"});
  EXPECT_EQ(r.verify_checksums().mismatched, std::vector<std::string>{"train"});
  EXPECT_EQ(CheckpointReader(p, MPI_COMM_NULL, {ReadMode::Independent, false}).read_train_state().get_int("step"),
            1031);

  std::string q = dir_ + "/optim_step.h5";
  {
    CheckpointWriter w(q, MPI_COMM_NULL, {CheckpointKind::Full, "", 7});
    w.write_tensors(kModelGroup, specs(), {});
    w.write_optimizer_step(7);
    w.close();
    H5Handle f = h5::open_file(q, MPI_COMM_NULL, /*writable=*/true);
    H5Handle g(WMTP_H5_CHECK(H5Gopen2(f, "optim", H5P_DEFAULT)));
    h5::write_attr(g, "step", int64_t(7 + 64));
  }
  expect_input_error([&] { CheckpointReader(q, MPI_COMM_NULL); }, {"optim_step.h5", "corrupt", "optimizer step"});
}

TEST_F(CheckpointErrors, FingerprintFollowsContentNamesAndShapes) {
  CheckpointReader good(good_, MPI_COMM_SELF);
  EXPECT_EQ(model_fingerprint(good), model_fingerprint(CheckpointReader(copy_of_good("same.h5"), MPI_COMM_NULL)));
  // One element changed (written as a new file): another fingerprint.
  std::string p = dir_ + "/one_changed.h5";
  {
    CheckpointWriter w(p, MPI_COMM_NULL, {CheckpointKind::Model, "", 7});
    std::vector<TensorPiece> pieces;
    for (const auto& s : specs()) pieces.push_back({s.name, 0, pattern_tensor(s, 1).reshape({-1})});
    pieces[1].data[3] += 1.0f;
    w.write_tensors(kModelGroup, specs(), pieces);
    w.close();
  }
  EXPECT_NE(model_fingerprint(CheckpointReader(p, MPI_COMM_NULL)), model_fingerprint(good));
  auto sp = specs();
  std::vector<uint64_t> sums = {1, 2};
  const std::string base = model_fingerprint("", sp, sums);
  sp[1].name = "other.weight";
  EXPECT_NE(model_fingerprint("", sp, sums), base);
  sp = specs();
  sp[1].shape = {2, 4};
  EXPECT_NE(model_fingerprint("", sp, sums), base);
}

TEST_F(CheckpointErrors, H5lsShowsTheNamedTree) {
  auto res = run_command("h5ls -r " + good_);
  ASSERT_EQ(res.exit_code, 0) << res.output;
  for (const char* line : {"/model                   Group", "/model/layers.0.attention.wq.weight Dataset {8, 8}",
                           "/model/norm.weight       Dataset {8}", "/train/step              Dataset {SCALAR}"})
    EXPECT_NE(res.output.find(line), std::string::npos) << "missing '" << line << "' in\n" << res.output;
  auto attrs = run_command("h5dump -a /format " + good_);
  EXPECT_NE(attrs.output.find("\"wmtp-checkpoint\""), std::string::npos) << attrs.output;
}

}  // namespace
}  // namespace wmtp::test
