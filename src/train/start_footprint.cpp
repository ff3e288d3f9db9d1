// StartFootprint: note what exists before a start, remove what a failed start added.
#include "train/start_footprint.h"

#include <algorithm>
#include <filesystem>

namespace fs = std::filesystem;

namespace wmtp {

StartFootprint::StartFootprint(const std::vector<std::string>& dirs) {
  std::error_code ec;
  for (const std::string& d : dirs) {
    if (d.empty()) continue;
    const fs::path dir = fs::absolute(d, ec).lexically_normal();
    if (!fs::exists(dir / "lock", ec)) new_locks_.push_back((dir / "lock").string());
    // The directory and every missing ancestor create_directories will make.
    for (fs::path p = dir; !p.empty() && p != p.parent_path() && !fs::exists(p, ec); p = p.parent_path())
      if (std::find(new_dirs_.begin(), new_dirs_.end(), p.string()) == new_dirs_.end()) new_dirs_.push_back(p.string());
  }
  // Deepest first, so that a parent is empty once its children are gone.
  std::sort(new_dirs_.begin(), new_dirs_.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
}

void StartFootprint::remove_created() const noexcept {
  std::error_code ec;
  // Unlinked while still held: a run starting now creates a fresh lock file rather than waiting on this one.
  for (const std::string& l : new_locks_) fs::remove(l, ec);
  for (const std::string& d : new_dirs_)
    if (fs::is_directory(d, ec) && fs::is_empty(d, ec)) fs::remove(d, ec);
}

}  // namespace wmtp
