// A stand-in for PyTorch's pip libtorch*.so, which carries and exports its own copies of pieces of
// libstdc++ (its toolchain links libstdc++_nonshared statically). This one exports a broken
// std::filesystem::remove_all: a program that binds to it instead of libstdc++'s crashes.
#include <cstdint>
#include <filesystem>

namespace std::filesystem {
__attribute__((visibility("default"))) std::uintmax_t remove_all(const path&) {
  void (*volatile jump_to_null)() = nullptr;  // what the real interposition did: a jump to address 0
  jump_to_null();
  return 0;
}
}  // namespace std::filesystem

extern "C" __attribute__((visibility("default"))) int wmtp_fake_stdlib_exporter() { return 1; }
