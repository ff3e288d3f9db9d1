// Communicator helpers shared by every backend.
#include "comm/communicator.h"

#include <ATen/ATen.h>

namespace wmtp {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

double Communicator::all_reduce_scalar(double v, ReduceOp op) {
  at::Tensor t = at::full({1}, v, at::kDouble);
  all_reduce(t, op);
  return t.item<double>();
}

int64_t Communicator::all_reduce_scalar(int64_t v, ReduceOp op) {
  at::Tensor t = at::full({1}, v, at::kLong);
  all_reduce(t, op);
  return t.item<int64_t>();
}

}  // namespace wmtp
