// Test-only tool: edits /train of a checkpoint in place, so test_verifiable_e2e.sh can show what a
// resume does when the verifiable EMA is missing or was never saved (weighted_mtp's behaviour).
//   edit_train_state FILE delete KEY...        unlink /train/KEY
//   edit_train_state FILE set KEY=VALUE...     overwrite an existing scalar /train/KEY (int64 or double)
// Not installed, not a program of the toolkit: checkpoints are otherwise only written by wmtp.
// The edit stands for a checkpoint written that way (weighted_mtp never saved its EMA), not for a
// corrupt one: /train's checksum is re-sealed over the edited values, so the resume sees a sound file.
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ckpt/checkpoint.h"
#include "core/check.h"
#include "core/h5.h"

namespace {

void edit_values(const char* path, const std::string& op, int n, char** args) {
  wmtp::H5Handle file = wmtp::h5::open_file(path, MPI_COMM_NULL, /*writable=*/true);
  for (int i = 0; i < n; ++i) {
    const std::string arg = args[i];
    if (op == "delete") {
      WMTP_H5_CHECK(H5Ldelete(file, ("/train/" + arg).c_str(), H5P_DEFAULT));
      continue;
    }
    const size_t eq = arg.find('=');
    if (op != "set" || eq == std::string::npos) throw wmtp::Error(wmtp::ErrorKind::Usage, "bad argument " + arg);
    wmtp::H5Handle d = wmtp::h5::open_dataset(file, "/train/" + arg.substr(0, eq));
    wmtp::H5Handle type(WMTP_H5_CHECK(H5Dget_type(d)));
    const std::string value = arg.substr(eq + 1);
    if (H5Tget_class(type) == H5T_FLOAT) {
      const double v = std::strtod(value.c_str(), nullptr);
      WMTP_H5_CHECK(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v));
    } else {
      const long long v = std::strtoll(value.c_str(), nullptr, 10);
      WMTP_H5_CHECK(H5Dwrite(d, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v));
    }
  }
}

// The checksum of the edited /train, as the writer computes it.
void reseal_train_state(const char* path) {
  wmtp::ReadOptions unverified;
  unverified.verify = false;
  const uint64_t sum = wmtp::train_state_checksum(
      wmtp::CheckpointReader(path, MPI_COMM_NULL, unverified).read_train_state());
  wmtp::H5Handle file = wmtp::h5::open_file(path, MPI_COMM_NULL, /*writable=*/true);
  wmtp::H5Handle train(WMTP_H5_CHECK(H5Gopen2(file, "train", H5P_DEFAULT)));
  if (wmtp::h5::has_attr(train, "checksum")) WMTP_H5_CHECK(H5Adelete(train, "checksum"));
  wmtp::h5::write_attr_u64(train, "checksum", sum);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s FILE delete KEY... | FILE set KEY=VALUE...\n", argv[0]);
    return 2;
  }
  try {
    wmtp::h5::silence_errors();
    edit_values(argv[1], argv[2], argc - 3, argv + 3);
    reseal_train_state(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edit_train_state: %s\n", e.what());
    return 1;
  }
  return 0;
}
