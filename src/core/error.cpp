// Exit-code mapping and source-location formatting for wmtp::Error.
#include "core/error.h"

namespace wmtp {

int exit_code_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Usage:
    case ErrorKind::Input: return 2;
    case ErrorKind::Runtime: return 1;
  }
  return 1;
}

std::string source_location(const char* file, int line) {
  std::string f(file);
  // Keep paths short and stable: from "src/" on.
  auto pos = f.rfind("/src/");
  if (pos != std::string::npos) f = f.substr(pos + 1);
  return f + ":" + std::to_string(line);
}

}  // namespace wmtp
