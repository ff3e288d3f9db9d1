// The headers most of wmtp's translation units include, compiled once per build tree into a
// precompiled header (CMake option WMTP_PCH; src/CMakeLists.txt). Never included by a source file:
// every file still includes what it uses, and a build with -DWMTP_PCH=OFF -DWMTP_UNITY=OFF checks that.
// ATen's headers are most of a unit's compile time; the standard headers are here because nearly
// every unit takes them anyway.
#pragma once
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>
