// Communicator conformance: every operation x dtype x size, blocking and non-blocking, on tensors of
// a given device, for any backend. A test binary includes this header once and instantiates the
// suite with its backends:
//
//   INSTANTIATE_TEST_SUITE_P(Staged, CommConformance, ::testing::Values(Backend{"staged", make}),
//                            backend_name);
//
// Each rank derives every rank's input from (seed, rank, index) and computes the expected result
// itself in double precision (rounded once to the dtype, like the contract), so no rank is special.
// Inputs are small integers: exact in every dtype, and sums over <= 4 ranks stay exact in bf16, so
// a backend that reduces bf16 natively (NCCL) and one that widens to fp32 (MPI) must agree bitwise.
#pragma once
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "comm/communicator.h"
#include "test_util.h"

namespace wmtp {
namespace conformance {

struct Backend {
  std::string name;
  std::function<std::unique_ptr<Communicator>()> make;
  // The device its tensors live on; called in SetUp (after MPI is up), so it may throw.
  std::function<c10::Device()> device = [] { return c10::Device(c10::kCPU); };
};
inline std::string backend_name(const ::testing::TestParamInfo<Backend>& p) { return p.param.name; }
inline void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kBFloat16, at::kInt, at::kLong, at::kDouble};
const std::vector<int64_t> kSizes = {1, 7, 1000, 4099};  // 4099 is prime: never divisible

inline bool is_int(at::ScalarType dt) { return dt == at::kInt || dt == at::kLong; }

// Values in [-8, 8], computed on the host and moved to `dev`.
inline at::Tensor input_of(int rank, int64_t n, at::ScalarType dt, int seed, c10::Device dev) {
  at::Tensor i = at::arange(n, at::kLong);
  at::Tensor v = (i * 13 + rank * 7 + seed * 31).remainder(17) - 8;
  return v.to(dt).to(dev);
}

inline bool same(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor x = a.cpu(), y = b.cpu();
  return x.scalar_type() == y.scalar_type() && x.sizes() == y.sizes() && at::equal(x, y);
}

// Every rank's input reduced in double, avg divided in fp32 (or double for double), rounded once.
inline at::Tensor expected_reduce(int world, int64_t n, at::ScalarType dt, int seed, ReduceOp op) {
  at::Tensor acc;
  for (int r = 0; r < world; ++r) {
    at::Tensor x = input_of(r, n, dt, seed, at::kCPU).to(at::kDouble);
    acc = !acc.defined() ? x : op == ReduceOp::Max ? at::maximum(acc, x) : acc + x;
  }
  if (op == ReduceOp::Avg)
    acc = dt == at::kDouble ? acc / double(world) : (acc.to(at::kFloat) / float(world)).to(at::kDouble);
  return acc.to(dt);
}

struct CommConformance : ::testing::TestWithParam<Backend> {
  void SetUp() override {
    device_ = GetParam().device();
    comm = GetParam().make();
  }
  std::unique_ptr<Communicator> comm;
  c10::Device dev() const { return device_; }
  c10::Device device_ = c10::Device(c10::kCPU);
  int world() const { return comm->size(); }
  int rank() const { return comm->rank(); }
  at::Tensor input(int r, int64_t n, at::ScalarType dt, int seed) const { return input_of(r, n, dt, seed, dev()); }
  std::string what(at::ScalarType dt, int64_t n, const char* op, bool async) const {
    return detail::concat(GetParam().name, " dtype ", c10::toString(dt), " n ", n, " op ", op, " async ", async);
  }
};

TEST_P(CommConformance, AllGatherEveryDtypeAndSize) {
  for (auto dt : kDtypes)
    for (int64_t n : kSizes)
      for (bool async : {false, true}) {
        at::Tensor in = input(rank(), n, dt, 1);
        at::Tensor out = at::empty({n * world()}, in.options());
        if (async) comm->all_gather_async(in, out)->wait();
        else
          comm->all_gather(in, out);
        for (int r = 0; r < world(); ++r)
          EXPECT_TRUE(same(out.narrow(0, r * n, n), input(r, n, dt, 1)))
              << what(dt, n, "gather", async) << " block " << r;
      }
}

TEST_P(CommConformance, ReduceScatterSumAvgMax) {
  for (auto dt : kDtypes)
    for (int64_t n : kSizes)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max})
        for (bool async : {false, true}) {
          if (op == ReduceOp::Avg && is_int(dt)) continue;  // refused: MisuseIsRefused
          at::Tensor in = input(rank(), n * world(), dt, 2);
          at::Tensor out = at::empty({n}, in.options());
          if (async) comm->reduce_scatter_async(in, out, op)->wait();
          else
            comm->reduce_scatter(in, out, op);
          at::Tensor want = expected_reduce(world(), n * world(), dt, 2, op).narrow(0, rank() * n, n);
          EXPECT_TRUE(same(out, want)) << what(dt, n, reduce_op_name(op), async);
          EXPECT_TRUE(same(in, input(rank(), n * world(), dt, 2)))
              << "input modified: " << what(dt, n, reduce_op_name(op), async);
        }
}

TEST_P(CommConformance, AllReduceSumAvgMax) {
  for (auto dt : kDtypes)
    for (int64_t n : kSizes)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max})
        for (bool async : {false, true}) {
          if (op == ReduceOp::Avg && is_int(dt)) continue;
          at::Tensor t = input(rank(), n, dt, 3);
          if (async) comm->all_reduce_async(t, op)->wait();
          else
            comm->all_reduce(t, op);
          EXPECT_TRUE(same(t, expected_reduce(world(), n, dt, 3, op))) << what(dt, n, reduce_op_name(op), async);
        }
}

TEST_P(CommConformance, BroadcastFromEveryRoot) {
  for (auto dt : kDtypes)
    for (int root = 0; root < world(); ++root)
      for (bool async : {false, true}) {
        at::Tensor t = input(rank(), 1001, dt, 4);
        if (async) comm->broadcast_async(t, root)->wait();
        else
          comm->broadcast(t, root);
        EXPECT_TRUE(same(t, input(root, 1001, dt, 4))) << what(dt, 1001, "broadcast", async) << " root " << root;
      }
}

TEST_P(CommConformance, AsyncHandlesOwnTheirTensorsAndWaitOutOfOrder) {
  const int64_t n = 1 << 16;
  std::vector<CommWorkPtr> works;
  std::vector<at::Tensor> outs;
  for (int k = 0; k < 3; ++k) {
    at::Tensor in = input(rank(), n, at::kFloat, 10 + k);  // only the handle keeps `in` alive
    at::Tensor out = at::empty({n * world()}, in.options());
    works.push_back(comm->all_gather_async(in, out));
    outs.push_back(out);
  }
  at::Tensor red = input(rank(), n, at::kBFloat16, 20);
  works.push_back(comm->all_reduce_async(red, ReduceOp::Sum));
  at::Tensor a = at::randn({256, 256}, at::TensorOptions().device(dev()));
  EXPECT_TRUE(at::mm(a, a).sum().defined());  // computation while the collectives are in flight
  for (int k = int(works.size()) - 1; k >= 0; --k) works[k]->wait();
  for (int k = 0; k < 3; ++k)
    for (int r = 0; r < world(); ++r) EXPECT_TRUE(same(outs[k].narrow(0, r * n, n), input(r, n, at::kFloat, 10 + k)));
  EXPECT_TRUE(same(red, expected_reduce(world(), n, at::kBFloat16, 20, ReduceOp::Sum)));
  {  // an unwaited handle waits in its destructor, so its result is complete once it is dropped
    at::Tensor t = input(rank(), n, at::kFloat, 30);
    { auto w = comm->all_reduce_async(t, ReduceOp::Max); }
    EXPECT_TRUE(same(t, expected_reduce(world(), n, at::kFloat, 30, ReduceOp::Max)));
  }
}

TEST_P(CommConformance, ScalarsHostStatisticsAndBarrier) {
  // Scalars and small host statistics work whatever the device the communicator is for.
  EXPECT_EQ(comm->all_reduce_scalar(int64_t(rank() + 1), ReduceOp::Sum), int64_t(world()) * (world() + 1) / 2);
  EXPECT_DOUBLE_EQ(comm->all_reduce_scalar(0.1 * rank(), ReduceOp::Max), 0.1 * (world() - 1));
  at::Tensor counts = at::full({3}, double(rank()), at::kDouble);  // CPU, as the trainer keeps them
  comm->all_reduce(counts, ReduceOp::Sum);
  EXPECT_TRUE(same(counts, at::full({3}, double(world()) * (world() - 1) / 2, at::kDouble)));
  comm->barrier();
}

TEST_P(CommConformance, MisuseIsRefusedWithAClearError) {
  at::Tensor in = input(rank(), 10, at::kLong, 5);
  at::Tensor out = at::empty({10}, in.options());
  if (world() > 1) {
    EXPECT_THROW(comm->all_gather(in, out), Error);  // wrong output size (local check)
  }
  EXPECT_THROW(comm->all_reduce(in, ReduceOp::Avg), Error);  // integer avg refused
  at::Tensor strided = at::zeros({4, 4}, at::TensorOptions().device(dev())).t();
  EXPECT_THROW(comm->all_reduce(strided, ReduceOp::Sum), Error);  // not contiguous
  EXPECT_THROW(comm->all_reduce(at::zeros({2}, at::TensorOptions().dtype(at::kShort).device(dev())), ReduceOp::Sum),
               Error);  // unsupported dtype
  at::Tensor f = input(rank(), 4, at::kFloat, 6);
  EXPECT_THROW(comm->all_gather(f, at::empty({4 * world()}, f.options().dtype(at::kDouble))), Error);  // dtypes differ
  if (!dev().is_cpu()) {  // input on the device, output on the host
    EXPECT_THROW(comm->all_gather(f, at::empty({4 * world()}, at::kFloat)), Error);
  }
}

}  // namespace conformance
}  // namespace wmtp
