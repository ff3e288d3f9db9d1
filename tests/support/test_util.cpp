// Test helpers: scratch directories and command execution.
#include "test_util.h"

#include <ftw.h>
#include <sys/wait.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace wmtp::test {

void remove_tree(const std::string& path) {
  // Depth first (FTW_DEPTH: a directory after its entries), without following links (FTW_PHYS).
  auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) { return std::remove(p) == 0 ? 0 : errno; };
  const int rc = nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
  if (rc != 0 && !(rc == -1 && errno == ENOENT))
    throw std::runtime_error("remove_tree('" + path + "'): " + std::strerror(rc > 0 ? rc : errno));
}

std::string scratch_dir(const std::string& name) {
  std::filesystem::path p = std::filesystem::path(WMTP_TEST_TMP_DIR) / name;
  remove_tree(p.string());
  std::filesystem::create_directories(p);
  return p.string();
}

std::string shared_scratch_dir(const std::string& name, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) scratch_dir(name);
  MPI_Barrier(comm);
  return (std::filesystem::path(WMTP_TEST_TMP_DIR) / name).string();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  std::string full = cmd + " 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string bin(const std::string& program) { return std::string(WMTP_BIN_DIR) + "/" + program; }
std::string source_path(const std::string& rel) { return std::string(WMTP_SOURCE_DIR) + "/" + rel; }
std::string mpiexec() { return WMTP_MPIEXEC; }
std::string tmp_path(const std::string& name) { return (std::filesystem::path(WMTP_TEST_TMP_DIR) / name).string(); }

}  // namespace wmtp::test
