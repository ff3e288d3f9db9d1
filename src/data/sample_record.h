// One JSONL line of the weighted_mtp schema (docs/data.md, "Input"), parsed and checked:
// {"instruction": str, "input": str (optional), "output": str, "task_id": str, "is_correct": bool,
//  "metadata": {"difficulty": int|null (optional), other keys...} (optional)}.
// Other metadata keys with simple values (string, number, bool, null) are kept as a compact JSON
// object; nested ones (test lists...) are dropped — the training programs never read them.
#pragma once
#include <climits>
#include <cstdint>
#include <string>
#include <string_view>

namespace wmtp {

// Stored for samples without a difficulty (metadata absent, or difficulty absent or null).
constexpr int32_t kNoDifficulty = INT32_MIN;

struct SampleRecord {
  std::string instruction, input, output, task_id;
  std::string problem_id;  // task_id without a trailing "_correct_<n>" / "_incorrect_<n>"
  bool is_correct = false;
  int32_t difficulty = kNoDifficulty;
  std::string metadata_json = "{}";  // the simple metadata values other than difficulty
};

// Throws Error(Input) with the problem only ("missing field 'output'", "field 'is_correct' must be a
// boolean, got string", "invalid UTF-8 at byte 17", "malformed JSON: ..."); the caller adds file:line.
SampleRecord parse_sample_record(std::string_view line);

// "abc_correct_3" -> "abc", "abc_incorrect_12" -> "abc", anything else unchanged (as weighted_mtp).
std::string problem_id_from_task_id(std::string_view task_id);

}  // namespace wmtp
