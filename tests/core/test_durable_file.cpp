// DurableFile / write_file_atomically: the committed file has the bytes written and no .tmp is left;
// an abandoned or failed write (a file-size limit standing in for a full disk: write() fails with
// EFBIG as it fails with ENOSPC) leaves nothing but what was there before — an older file under the
// final name keeps its bytes. The fsync-before-rename order is checked on the programs by
// tests/ckpt/test_export_durable.cpp.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/durable_file.h"
#include "core/error.h"
#include "test_util.h"

namespace wmtp {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) { return test::scratch_dir("durable_file_" + name); }

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Files may grow to `bytes` at most while alive (RLIMIT_FSIZE; SIGXFSZ ignored so write() fails).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit r = old_;
    r.rlim_cur = bytes;
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &r), 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = nullptr;
};

TEST(DurableFile, CommitLeavesTheBytesUnderTheFinalNameOnly) {
  const std::string dir = fresh_dir("commit");
  {
    DurableFile f(dir + "/a.json");
    f.write("{\"x\": ");
    f.write(std::string("1}\n"));
    EXPECT_TRUE(fs::exists(dir + "/a.json.tmp"));
    EXPECT_FALSE(fs::exists(dir + "/a.json"));
    f.commit();
  }
  EXPECT_EQ(test::read_file(dir + "/a.json"), "{\"x\": 1}\n");
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"a.json"}));
  write_file_atomically(dir + "/a.json", "second\n");  // replaces it whole
  EXPECT_EQ(test::read_file(dir + "/a.json"), "second\n");
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"a.json"}));
}

TEST(DurableFile, AnAbandonedWriteLeavesWhatWasThere) {
  const std::string dir = fresh_dir("abandon");
  write_file_atomically(dir + "/config.json", "old\n");
  try {
    DurableFile f(dir + "/config.json");
    f.write("half of the new");
    throw std::runtime_error("a later tensor failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(test::read_file(dir + "/config.json"), "old\n");
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"config.json"}));
}

TEST(DurableFile, AFailedWriteNamesTheFileAndLeavesWhatWasThere) {
  const std::string dir = fresh_dir("full");
  write_file_atomically(dir + "/config.json", "old\n");
  const std::string big(1 << 16, 'x');
  std::string msg;
  {
    FileSizeLimit limit(4096);
    try {
      write_file_atomically(dir + "/config.json", big);
    } catch (const Error& e) {
      msg = e.what();
      EXPECT_EQ(e.exit_code(), 1);
    }
  }
  EXPECT_NE(msg.find("config.json.tmp"), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;  // errno's text
  EXPECT_EQ(test::read_file(dir + "/config.json"), "old\n");
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"config.json"}));
  {  // a new file that does not fit: nothing at all
    FileSizeLimit limit(4096);
    EXPECT_THROW(write_file_atomically(dir + "/new.json", big), Error);
  }
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"config.json"}));
}

TEST(DurableFile, CommitFileRemovesItsTemporaryWhenTheRenameFails) {
  const std::string dir = fresh_dir("rename");
  write_file_atomically(dir + "/x.h5.tmp", "bytes");
  fs::create_directories(dir + "/x.h5/occupied");  // rename onto a non-empty directory fails
  EXPECT_THROW(commit_file(dir + "/x.h5.tmp", dir + "/x.h5"), Error);
  EXPECT_FALSE(fs::exists(dir + "/x.h5.tmp"));
  EXPECT_TRUE(fs::is_directory(dir + "/x.h5/occupied"));
}

}  // namespace
}  // namespace wmtp
