// StoreDtype parsing and naming (ckpt/store_dtype.h).
#include "ckpt/store_dtype.h"

#include "core/error.h"

namespace wmtp {

StoreDtype parse_store_dtype(const std::string& s, const std::string& option) {
  if (s == "fp32") return StoreDtype::Float32;
  if (s == "bf16") return StoreDtype::BFloat16;
  throw_usage(option, " must be fp32 or bf16, got '", s, "'");
}

const char* torch_dtype_name(StoreDtype d) { return d == StoreDtype::BFloat16 ? "bfloat16" : "float32"; }

}  // namespace wmtp
