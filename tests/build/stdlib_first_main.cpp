// Links the stand-in exporter (so it is a DT_NEEDED library like libtorch*.so) and calls
// std::filesystem::remove_all: with libstdc++ first in the search order, libstdc++'s runs.
#include <cstdio>
#include <filesystem>
#include <fstream>

extern "C" int wmtp_fake_stdlib_exporter();

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir / "sub");
  std::ofstream(dir / "sub" / "f") << "x";
  const auto n = std::filesystem::remove_all(dir);
  std::printf("removed %ju entries (exporter linked: %d)\n", static_cast<uintmax_t>(n), wmtp_fake_stdlib_exporter());
  return std::filesystem::exists(dir) ? 1 : 0;
}
