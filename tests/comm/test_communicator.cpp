// MpiCommunicator under mpirun: every operation x dtype, sizes not divisible by the world size,
// blocking and non-blocking (overlapped with computation). Each rank derives every rank's input from
// (seed, rank, index) and so computes the expected result on its own — no rank is special.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "comm/mpi_communicator.h"
#include "test_util.h"

namespace wmtp {
namespace {

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kBFloat16, at::kInt, at::kLong};
const std::vector<int64_t> kSizes = {1, 7, 1000, 4099};  // 4099 is prime: never divisible

// Small integers in [-8, 8]: exact in every dtype, and sums over <= 4 ranks stay exact in bf16.
at::Tensor input_of(int rank, int64_t n, at::ScalarType dt, int seed) {
  at::Tensor i = at::arange(n, at::kLong);
  at::Tensor v = (i * 13 + rank * 7 + seed * 31).remainder(17) - 8;
  return v.to(dt);
}

bool same(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && at::equal(a, b);
}

// Expected reduction of every rank's input, computed in fp64 then rounded once, like the contract.
at::Tensor expected_reduce(int world, int64_t n, at::ScalarType dt, int seed, ReduceOp op) {
  at::Tensor acc;
  for (int r = 0; r < world; ++r) {
    at::Tensor x = input_of(r, n, dt, seed).to(at::kDouble);
    if (!acc.defined()) acc = x;
    else
      acc = op == ReduceOp::Max ? at::maximum(acc, x) : acc + x;
  }
  if (op == ReduceOp::Avg) acc = (acc.to(at::kFloat) / float(world)).to(at::kDouble);
  return acc.to(dt);
}

struct Comm : ::testing::Test {
  MpiCommunicator comm{test::mpi().world()};
  int world() const { return comm.size(); }
  int rank() const { return comm.rank(); }
};

TEST_F(Comm, AllGatherEveryDtypeAndSize) {
  for (auto dt : kDtypes)
    for (int64_t n : kSizes)
      for (bool async : {false, true}) {
        at::Tensor in = input_of(rank(), n, dt, 1);
        at::Tensor out = at::empty({n * world()}, in.options());
        if (async) comm.all_gather_async(in, out)->wait();
        else
          comm.all_gather(in, out);
        for (int r = 0; r < world(); ++r)
          EXPECT_TRUE(same(out.narrow(0, r * n, n), input_of(r, n, dt, 1)))
              << "dtype " << c10::toString(dt) << " n " << n << " block " << r << " async " << async;
      }
}

TEST_F(Comm, ReduceScatterSumAndAvg) {
  for (auto dt : kDtypes)
    for (int64_t n : kSizes)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max})
        for (bool async : {false, true}) {
          bool is_int = dt == at::kInt || dt == at::kLong;
          if (op == ReduceOp::Avg && is_int) continue;  // refused, tested below
          at::Tensor in = input_of(rank(), n * world(), dt, 2);
          at::Tensor out = at::empty({n}, in.options());
          if (async) comm.reduce_scatter_async(in, out, op)->wait();
          else
            comm.reduce_scatter(in, out, op);
          at::Tensor want = expected_reduce(world(), n * world(), dt, 2, op).narrow(0, rank() * n, n);
          EXPECT_TRUE(same(out, want)) << "dtype " << c10::toString(dt) << " n " << n << " op " << reduce_op_name(op)
                                       << " async " << async;
        }
}

TEST_F(Comm, AllReduceSumMaxAvg) {
  for (auto dt : kDtypes)
    for (int64_t n : kSizes)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg})
        for (bool async : {false, true}) {
          bool is_int = dt == at::kInt || dt == at::kLong;
          if (op == ReduceOp::Avg && is_int) continue;
          at::Tensor t = input_of(rank(), n, dt, 3);
          if (async) comm.all_reduce_async(t, op)->wait();
          else
            comm.all_reduce(t, op);
          EXPECT_TRUE(same(t, expected_reduce(world(), n, dt, 3, op)))
              << "dtype " << c10::toString(dt) << " n " << n << " op " << reduce_op_name(op);
        }
}

// Rounding to bf16 written out in double: round to nearest, ties to even, on the 8-significant-bit
// grid (positive normal numbers only; the test uses values in [1, 8)).
double round_to_bf16(double v) {
  const double ulp = std::ldexp(1.0, std::ilogb(v) - 7);
  return std::nearbyint(v / ulp) * ulp;  // default rounding mode: half to even
}

// Rank r's value of element i: 1 + k/128 with k pseudo-random (splitmix64), exact in bf16; sums over
// <= 4 ranks are exact in double and in fp32.
double bf16_input(int rank, int64_t i) {
  uint64_t z = uint64_t(i * 8 + rank) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 29)) * 0xBF58476D1CE4E5B9ULL;
  z ^= z >> 32;
  return 1.0 + double(z % 128) / 128.0;
}

// Every way of summing `v` two at a time with a bf16 rounding after each addition (the orders an
// MPI reduction tree may use), in a fixed enumeration order.
void per_hop_sums(std::vector<double> v, std::vector<double>& out) {
  if (v.size() == 1) return out.push_back(v[0]);
  for (size_t a = 0; a < v.size(); ++a)
    for (size_t b = a + 1; b < v.size(); ++b) {
      std::vector<double> rest;
      for (size_t k = 0; k < v.size(); ++k)
        if (k != a && k != b) rest.push_back(v[k]);
      rest.push_back(round_to_bf16(v[a] + v[b]));
      per_hop_sums(rest, out);
    }
}

TEST_F(Comm, Bf16SumIsRoundedOnceFromFp32) {
  // The contract: a bf16 sum is the exact sum of every rank's value rounded once to bf16. The inputs
  // are chosen so that other implementations fail: at 3+ ranks, for every order of additions an
  // implementation rounding to bf16 after each hop could use, many sums differ from rounding once
  // (checked below); at 2 ranks (a single addition, which any order rounds once) many sums fall
  // exactly half-way between two bf16 values, so truncating or rounding ties away from even fails.
  const int64_t n = 4096;
  at::Tensor b = at::empty({n}, at::kFloat);
  for (int64_t i = 0; i < n; ++i) b[i] = float(bf16_input(rank(), i));
  b = b.to(at::kBFloat16);
  ASSERT_TRUE(at::equal(b.to(at::kFloat), b.to(at::kFloat).to(at::kBFloat16).to(at::kFloat)));
  comm.all_reduce(b, ReduceOp::Sum);
  at::Tensor got = b.to(at::kDouble).contiguous();
  const double* g = got.data_ptr<double>();

  int64_t wrong = 0, ties = 0;
  std::vector<int64_t> order_differs;  // per enumerated order: sums where per-hop rounding is wrong
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> v;
    double exact = 0;
    for (int r = 0; r < world(); ++r) v.push_back(bf16_input(r, i)), exact += v.back();
    const double want = round_to_bf16(exact);
    const double ulp = std::ldexp(1.0, std::ilogb(exact) - 7);
    if (std::fmod(exact, ulp) == ulp / 2) ++ties;
    std::vector<double> hops;
    per_hop_sums(v, hops);
    order_differs.resize(hops.size(), 0);
    for (size_t j = 0; j < hops.size(); ++j) order_differs[j] += hops[j] != want;
    if (g[i] != want) {
      if (wrong < 5)
        ADD_FAILURE() << "element " << i << ": got " << g[i] << ", want " << want << " (exact " << exact << ")";
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << n << " bf16 sums";
  // The inputs must be able to tell the implementations apart, or the test proves nothing.
  if (world() >= 2) {
    EXPECT_GT(ties, n / 8) << "too few half-way sums to detect a wrong rounding mode";
  }
  if (world() >= 3) {
    EXPECT_GT(*std::min_element(order_differs.begin(), order_differs.end()), n / 16)
        << "some order of per-hop bf16 additions agrees with rounding once too often";
  }
}

TEST_F(Comm, BroadcastFromEveryRoot) {
  for (auto dt : kDtypes)
    for (int root = 0; root < world(); ++root)
      for (bool async : {false, true}) {
        at::Tensor t = input_of(rank(), 1001, dt, 4);
        if (async) comm.broadcast_async(t, root)->wait();
        else
          comm.broadcast(t, root);
        EXPECT_TRUE(same(t, input_of(root, 1001, dt, 4))) << "root " << root;
      }
}

TEST_F(Comm, AsyncOverlapsComputationAndOwnsItsTensors) {
  // Post several collectives, drop our own references, compute, then wait in reverse order.
  const int64_t n = 1 << 16;
  std::vector<CommWorkPtr> works;
  std::vector<at::Tensor> outs;
  for (int k = 0; k < 3; ++k) {
    at::Tensor in = input_of(rank(), n, at::kFloat, 10 + k);  // only the handle keeps `in` alive
    at::Tensor out = at::empty({n * world()}, at::kFloat);
    works.push_back(comm.all_gather_async(in, out));
    outs.push_back(out);
  }
  at::Tensor red = input_of(rank(), n, at::kBFloat16, 20);
  works.push_back(comm.all_reduce_async(red, ReduceOp::Sum));
  at::Tensor a = at::randn({256, 256});
  at::Tensor busy = at::mm(a, a).sum();  // computation while the collectives are in flight
  EXPECT_TRUE(busy.defined());
  for (int k = int(works.size()) - 1; k >= 0; --k) works[k]->wait();
  for (int k = 0; k < 3; ++k)
    for (int r = 0; r < world(); ++r)
      EXPECT_TRUE(same(outs[k].narrow(0, r * n, n), input_of(r, n, at::kFloat, 10 + k)));
  EXPECT_TRUE(same(red, expected_reduce(world(), n, at::kBFloat16, 20, ReduceOp::Sum)));
  // An unwaited handle waits in its destructor rather than leaving MPI writing into freed memory.
  {
    at::Tensor t = input_of(rank(), n, at::kFloat, 30);
    auto w = comm.all_reduce_async(t, ReduceOp::Max);
  }
}

TEST_F(Comm, ScalarsAndBarrier) {
  EXPECT_EQ(comm.all_reduce_scalar(int64_t(rank() + 1), ReduceOp::Sum), int64_t(world()) * (world() + 1) / 2);
  EXPECT_DOUBLE_EQ(comm.all_reduce_scalar(0.1 * rank(), ReduceOp::Max), 0.1 * (world() - 1));
  comm.barrier();
}

TEST_F(Comm, MisuseIsRefusedWithAClearError) {
  at::Tensor in = input_of(rank(), 10, at::kLong, 5);
  at::Tensor out = at::empty({10}, in.options());
  if (world() > 1) {
    EXPECT_THROW(comm.all_gather(in, out), Error);  // wrong output size (local check)
  }
  EXPECT_THROW(comm.all_reduce(in, ReduceOp::Avg), Error);  // integer avg refused
  at::Tensor strided = at::zeros({4, 4}).t();
  EXPECT_THROW(comm.all_reduce(strided, ReduceOp::Sum), Error);  // not contiguous
  EXPECT_THROW(comm.all_reduce(at::zeros({2}, at::kShort), ReduceOp::Sum), Error);
}

}  // namespace
}  // namespace wmtp
