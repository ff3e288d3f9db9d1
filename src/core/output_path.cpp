// check_output_file / check_output_dir.
#include "core/output_path.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace fs = std::filesystem;

namespace wmtp {

namespace {

// The first existing ancestor of `p` that is not a directory, if any ("a/b/c" with "a/b" a file).
std::string file_in_the_way(const fs::path& p) {
  std::error_code ec;
  for (fs::path a = p; !a.empty() && a != a.parent_path(); a = a.parent_path())
    if (fs::exists(a, ec) && !fs::is_directory(a, ec)) return a.string();
  return {};
}

}  // namespace

namespace {

// Creates `dir` (with parents) and checks it is a writable directory; messages name `path`, what the
// user gave, under `what`.
void ensure_writable_dir(const fs::path& dir, const std::string& path, const std::string& what) {
  const std::string blocker = file_in_the_way(dir);
  if (!blocker.empty()) throw_usage(what, " '", path, "': '", blocker, "' is a file, not a directory");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_usage(what, " '", path, "': cannot create directory '", dir.string(), "': ", ec.message());
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw_usage(what, " '", path, "': directory '", dir.string(), "' is not writable: ", std::strerror(errno));
}

}  // namespace

void check_output_dir(const std::string& dir, const std::string& what) {
  if (dir.empty()) throw_usage(what, ": no directory given");
  ensure_writable_dir(fs::path(dir), dir, what);
}

void check_output_file(const std::string& path, const std::string& what) {
  if (path.empty()) throw_usage(what, ": no file given");
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) throw_usage(what, " '", path, "' is a directory; expected a file name");
  if (p.filename().empty()) throw_usage(what, " '", path, "' names a directory; expected a file name");
  ensure_writable_dir(p.parent_path().empty() ? fs::path(".") : p.parent_path(), path, what);
}

}  // namespace wmtp
