// Parsing and validation of one JSONL sample line.
#include "data/sample_record.h"

#include <cctype>

#include "core/error.h"
#include "core/json.h"

namespace wmtp {

namespace {

const json::Value& require(const json::Value& obj, const char* key) {
  const json::Value* v = obj.find(key);
  if (!v) throw_input("missing field '", key, "'");
  return *v;
}

std::string as_string_field(const json::Value& v, const char* key) {
  if (!v.is_string()) throw_input("field '", key, "' must be a string, got ", json::type_name(v.type()));
  return v.as_string();
}

bool is_simple(const json::Value& v) { return !v.is_array() && !v.is_object(); }

bool is_blank_line(std::string_view s) {
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  return true;
}

}  // namespace

std::string problem_id_from_task_id(std::string_view task_id) {
  // Strip a trailing _(correct|incorrect)_<digits>.
  size_t end = task_id.size();
  size_t d = end;
  while (d > 0 && std::isdigit(static_cast<unsigned char>(task_id[d - 1]))) --d;
  if (d == end || d == 0 || task_id[d - 1] != '_') return std::string(task_id);
  std::string_view head = task_id.substr(0, d - 1);
  for (std::string_view suffix : {std::string_view("_incorrect"), std::string_view("_correct")}) {
    if (head.size() >= suffix.size() && head.substr(head.size() - suffix.size()) == suffix)
      return std::string(head.substr(0, head.size() - suffix.size()));
  }
  return std::string(task_id);
}

SampleRecord parse_sample_record(std::string_view line) {
  if (is_blank_line(line)) throw_input("empty line");
  if (size_t bad = json::find_invalid_utf8(line); bad != std::string_view::npos)
    throw_input("invalid UTF-8 at byte ", bad + 1);
  json::Value v;
  try {
    v = json::parse(line);
  } catch (const Error& e) {
    std::string_view what = e.what();
    if (what.substr(0, 6) == "json: ") what.remove_prefix(6);
    // A line is one line of JSON: "at line 1 column 12" says no more than "at column 12".
    std::string msg(what);
    if (auto at = msg.find(" at line 1 column "); at != std::string::npos) msg.replace(at, 18, " at column ");
    throw_input("malformed JSON: ", msg);
  }
  if (!v.is_object()) throw_input("a line must be a JSON object, got ", json::type_name(v.type()));

  SampleRecord r;
  r.instruction = as_string_field(require(v, "instruction"), "instruction");
  if (const json::Value* in = v.find("input"); in && !in->is_null()) r.input = as_string_field(*in, "input");
  r.output = as_string_field(require(v, "output"), "output");
  r.task_id = as_string_field(require(v, "task_id"), "task_id");
  if (r.task_id.empty()) throw_input("field 'task_id' is empty");
  const json::Value& ok = require(v, "is_correct");
  if (!ok.is_bool()) throw_input("field 'is_correct' must be a boolean, got ", json::type_name(ok.type()));
  r.is_correct = ok.as_bool();
  r.problem_id = problem_id_from_task_id(r.task_id);

  if (const json::Value* meta = v.find("metadata"); meta && !meta->is_null()) {
    if (!meta->is_object()) throw_input("field 'metadata' must be an object, got ", json::type_name(meta->type()));
    json::Value kept = json::Value::object();
    for (const auto& [key, val] : meta->as_object()) {
      if (key == "difficulty") {
        if (val.is_null()) continue;
        if (!val.is_number())
          throw_input("field 'metadata.difficulty' must be an integer, got ", json::type_name(val.type()));
        double d = val.as_double();
        if (d != static_cast<double>(static_cast<int64_t>(d)) || d <= INT32_MIN || d > INT32_MAX)
          throw_input("field 'metadata.difficulty' must be an integer in int32 range, got ", json::dump(val));
        r.difficulty = static_cast<int32_t>(d);
      } else if (is_simple(val)) {
        kept.set(key, val);
      }
    }
    r.metadata_json = json::dump(kept);
  }
  return r;
}

}  // namespace wmtp
