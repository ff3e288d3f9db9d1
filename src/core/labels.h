// The label convention shared by collation (data/) and the losses (model/): a target of -100 means
// "no target here" (prompt, padding), as in PyTorch's cross_entropy ignore_index.
#pragma once
#include <cstdint>

namespace wmtp {
constexpr int64_t kIgnoreIndex = -100;
}
