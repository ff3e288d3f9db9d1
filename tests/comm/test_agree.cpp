// Error agreement (comm/agree.h): when any rank fails, every rank throws the same agreed error —
// the lowest failing rank's message and kind — so every rank exits with the same code.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "comm/agree.h"
#include "comm/mpi_util.h"
#include "test_util.h"

using namespace wmtp;

namespace {

MPI_Comm world() { return test::mpi().world(); }

struct Seen {
  bool threw = false;
  ErrorKind kind = ErrorKind::Runtime;
  bool agreed = false;
  std::string what;
};

template <class Fn>
Seen run(Fn fn) {
  Seen s;
  try {
    fn();
  } catch (const Error& e) {
    s = {true, e.kind(), e.agreed(), e.what()};
  }
  return s;
}

// Every rank's (kind, message) must be identical: compare against rank 0's.
void expect_same_everywhere(const Seen& s) {
  const std::string mine = std::to_string(int(s.threw)) + ":" + std::to_string(int(s.kind)) + ":" + s.what;
  const std::string root = bcast_string(world(), mine, 0);
  EXPECT_TRUE(any_rank(world(), mine != root) == false)
      << "rank " << comm_rank(world()) << " saw '" << mine << "', rank 0 saw '" << root << "'";
}

}  // namespace

TEST(Agree, NoFailureReturnsTheValueOnEveryRank) {
  int v = agreed(world(), [] { return 41 + 1; });
  EXPECT_EQ(v, 42);
  Seen s = run([] { agreed(world(), [] {}); });
  EXPECT_FALSE(s.threw);
}

TEST(Agree, OneFailingRankFailsEveryRankWithItsKindAndMessage) {
  const int last = comm_size(world()) - 1;
  Seen s = run([&] {
    agreed(world(), [&] {
      if (comm_rank(world()) == last) throw_input("bad input seen by rank ", last);
    });
  });
  EXPECT_TRUE(s.threw);
  EXPECT_TRUE(s.agreed);
  EXPECT_EQ(s.kind, ErrorKind::Input);
  EXPECT_EQ(s.what, "bad input seen by rank " + std::to_string(last));
  expect_same_everywhere(s);
}

TEST(Agree, DifferentFailuresBecomeTheLowestFailingRanksErrorEverywhere) {
  // Rank 0 hits a runtime error, the others an input error: one kind, hence one exit code, for all.
  Seen s = run([&] {
    agreed(world(), [&] {
      if (comm_rank(world()) == 0) throw_runtime("disk said no");
      throw_input("file is bad on rank ", comm_rank(world()));
    });
  });
  EXPECT_TRUE(s.threw);
  EXPECT_EQ(s.kind, ErrorKind::Runtime);
  EXPECT_EQ(exit_code_for(s.kind), 1);
  EXPECT_EQ(s.what, "disk said no");
  expect_same_everywhere(s);

  // And the other way round: the lowest failing rank's kind wins, not each rank's own.
  const int size = comm_size(world());
  Seen t = run([&] {
    agreed(world(), [&] {
      if (comm_rank(world()) == 0) return;
      if (comm_rank(world()) == 1) throw_input("rank 1 input");
      throw_runtime("rank ", comm_rank(world()), " runtime");
    });
  });
  EXPECT_EQ(t.threw, size > 1);
  if (size > 1) {
    EXPECT_EQ(t.kind, ErrorKind::Input);
    EXPECT_EQ(t.what, "rank 1 input");
  }
  expect_same_everywhere(t);
}

TEST(Agree, ForeignExceptionsAreRuntimeErrors) {
  Seen s = run([&] {
    agreed(world(), [&] {
      if (comm_rank(world()) == 0) throw std::out_of_range("vector::at");
    });
  });
  EXPECT_TRUE(s.threw);
  EXPECT_EQ(s.kind, ErrorKind::Runtime);
  EXPECT_EQ(s.what, "vector::at");
  expect_same_everywhere(s);
}

TEST(Agree, OnRank0RunsOnceAndSharesItsVerdict) {
  int calls = 0;
  Seen s = run([&] {
    on_rank0(world(), [&] {
      ++calls;
      throw_usage("rank 0 refuses");
    });
  });
  EXPECT_EQ(calls, comm_rank(world()) == 0 ? 1 : 0);
  EXPECT_TRUE(s.threw);
  EXPECT_EQ(s.kind, ErrorKind::Usage);
  EXPECT_EQ(s.what, "rank 0 refuses");
  expect_same_everywhere(s);
}

TEST(Agree, OneProcessCommunicator) {
  Seen s = run([] { agreed(MPI_COMM_NULL, [] { throw_input("alone"); }); });
  EXPECT_TRUE(s.threw);
  EXPECT_TRUE(s.agreed);
  EXPECT_EQ(s.kind, ErrorKind::Input);
}
