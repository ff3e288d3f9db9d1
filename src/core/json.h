// Minimal JSON value, parser and writer (params.json, config.json, safetensors headers, JSONL input,
// PEFT adapter configs, metrics.jsonl). The user's dependency list has no JSON library; this one
// is strict (RFC 8259: no comments, no trailing commas, no duplicate keys, valid UTF-8 only) because it reads
// untrusted file headers, and it reports line:column. Objects keep insertion order.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wmtp::json {

class Value {
 public:
  enum class Type { Null, Bool, Int, Double, String, Array, Object };

  Value() = default;
  Value(bool b) : type_(Type::Bool), b_(b) {}
  Value(int i) : type_(Type::Int), i_(i) {}
  Value(int64_t i) : type_(Type::Int), i_(i) {}
  Value(uint64_t i) : type_(Type::Int), i_(int64_t(i)) {}
  Value(double d) : type_(Type::Double), d_(d) {}
  Value(std::string s) : type_(Type::String), s_(std::move(s)) {}
  Value(const char* s) : type_(Type::String), s_(s) {}
  static Value array();
  static Value object();

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_int() const { return type_ == Type::Int; }
  bool is_double() const { return type_ == Type::Double; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Double; }
  bool is_string() const { return type_ == Type::String; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_object() const { return type_ == Type::Object; }

  // Each as_* throws Error(Input) naming the expected and actual type.
  bool as_bool() const;
  int64_t as_int() const;    // a Double with an exact integer value is accepted
  double as_double() const;  // an Int is accepted
  const std::string& as_string() const;
  const std::vector<Value>& as_array() const;
  std::vector<Value>& as_array();
  const std::vector<std::pair<std::string, Value>>& as_object() const;

  const Value* find(const std::string& key) const;  // nullptr if absent; objects only
  const Value& at(const std::string& key) const;    // throws Error(Input) "missing key 'k'"
  Value& set(const std::string& key, Value v);      // object insert-or-replace
  Value& push(Value v);                             // array append

 private:
  Type type_ = Type::Null;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::string s_;
  std::vector<Value> a_;
  std::vector<std::pair<std::string, Value>> o_;
};

const char* type_name(Value::Type t);

// Throws Error(Input): "json: <what> at line L column C". `max_depth` bounds nesting (hostile input).
Value parse(std::string_view text, int max_depth = 256);
// Compact; doubles printed with the fewest digits (15-17) that round-trip exactly; NaN/Inf refused.
std::string dump(const Value& v);

// Whether `s` is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF). Returns the byte offset of
// the first invalid sequence, or npos.
size_t find_invalid_utf8(std::string_view s);

}  // namespace wmtp::json
