// Checkpoints from the GPU (CUDA builds, under mpirun): pieces living on the GPU are written through
// pinned staging, and the file holds the same stored bytes, dataset by dataset, as the file written
// from the same values on the CPU (fp32 and bf16 storage, several pieces per rank); reading into GPU
// pieces gives bitwise the values a CPU read gives.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "ckpt/checkpoint.h"
#include "ckpt_test_util.h"
#include "core/error.h"
#include "comm/device.h"
#include "test_util.h"

namespace wmtp {
namespace {

c10::Device my_gpu() {
  const int n = cuda_device_count();
  if (n == 0) throw Error(ErrorKind::Runtime, "test_checkpoint_device_cuda needs a GPU (CUDA build): none visible");
  c10::Device d(c10::kCUDA, static_cast<c10::DeviceIndex>(test::mpi().local_rank() % n));
  use_device(d);
  return d;
}

std::vector<TensorPiece> on_device(const std::vector<TensorPiece>& pieces, c10::Device d) {
  std::vector<TensorPiece> out = pieces;
  for (auto& p : out) p.data = p.data.to(d);
  return out;
}

TEST(CheckpointDevice, GpuPiecesWriteTheCpuBytesAndLoadBack) {
  const c10::Device gpu = my_gpu();
  MPI_Comm comm = test::mpi().world();
  const int rank = test::mpi().rank(), world = test::mpi().world_size();
  const std::vector<TensorSpec> specs = {{"a", {37, 5}}, {"b", {1001}}, {"c", {3, 4, 129}}};
  // One directory per world size: ctest runs the np 1 and np 2 tests at the same time, and a shared
  // one lets np 2's rank 0 empty it while np 1 writes its files.
  const std::string dir = test::shared_scratch_dir("ckpt_device_cuda_w" + std::to_string(world), comm);
  for (StoreDtype dtype : {StoreDtype::Float32, StoreDtype::BFloat16}) {
    const auto ranges = test::owned_ranges(specs, test::Layout::Interleaved, rank, world);
    const auto cpu_pieces = test::make_pieces(specs, ranges, 7);
    const std::string tag = dtype == StoreDtype::Float32 ? "fp32" : "bf16";
    CheckpointHeader h;
    h.kind = CheckpointKind::Model;
    h.model_args_json = "{}";
    for (const auto& [name, pieces] : {std::make_pair(std::string("cpu"), cpu_pieces),
                                       std::make_pair(std::string("gpu"), on_device(cpu_pieces, gpu))}) {
      CheckpointWriter w(dir + "/" + name + "_" + tag + ".h5", comm, h);
      w.write_tensors("model", specs, pieces, dtype);
      w.close();
    }
    CheckpointReader from_cpu(dir + "/cpu_" + tag + ".h5", comm), from_gpu(dir + "/gpu_" + tag + ".h5", comm);
    for (const auto& s : specs) {
      at::Tensor x = from_cpu.read_tensor_stored("model", s.name), y = from_gpu.read_tensor_stored("model", s.name);
      EXPECT_EQ(x.scalar_type(), y.scalar_type()) << tag << " " << s.name;
      EXPECT_TRUE(test::bitwise_equal(x, y)) << tag << " " << s.name;
    }
    // Load into pieces on the GPU: the same values as into pieces on the CPU.
    at::Tensor cpu_buf;
    auto cpu_read = test::make_empty_pieces(specs, ranges, cpu_buf);
    from_gpu.read_tensors("model", specs, cpu_read);
    auto gpu_read = on_device(cpu_read, gpu);
    for (auto& p : gpu_read) p.data.zero_();
    from_gpu.read_tensors("model", specs, gpu_read);
    for (size_t i = 0; i < cpu_read.size(); ++i)
      EXPECT_TRUE(test::bitwise_equal(cpu_read[i].data, gpu_read[i].data.cpu())) << tag << " piece " << i;
  }
}

}  // namespace
}  // namespace wmtp
