// Helpers for the data tests: the tiny tokenizer and datasets built by tests/data/CMakeLists.txt,
// and the bundled JSONL corpus read with the JSON parser (an independent path to the same facts).
#pragma once
#include <fstream>
#include <string>
#include <vector>

#include "core/json.h"
#include "test_util.h"

namespace wmtp::test {

inline std::string tiny_tokenizer() { return WMTP_TINY_TOKENIZER; }
inline std::string tiny_dataset(const std::string& split) {
  return std::string(WMTP_TINY_DATA_DIR) + "/" + split + ".h5";
}
inline std::string tiny_jsonl(const std::string& split) { return source_path("data/tiny/" + split + ".jsonl"); }

inline std::vector<json::Value> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<json::Value> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

}  // namespace wmtp::test
