// JSON parser/writer: recursive descent over a string_view with line/column tracking.
#include "core/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace wmtp::json {

const char* type_name(Value::Type t) {
  switch (t) {
    case Value::Type::Null: return "null";
    case Value::Type::Bool: return "boolean";
    case Value::Type::Int: return "integer";
    case Value::Type::Double: return "number";
    case Value::Type::String: return "string";
    case Value::Type::Array: return "array";
    case Value::Type::Object: return "object";
  }
  return "?";
}

Value Value::array() {
  Value v;
  v.type_ = Type::Array;
  return v;
}
Value Value::object() {
  Value v;
  v.type_ = Type::Object;
  return v;
}

namespace {
[[noreturn]] void type_error(const char* want, Value::Type got) {
  throw_input("json: expected ", want, ", got ", type_name(got));
}
}  // namespace

bool Value::as_bool() const {
  if (type_ != Type::Bool) type_error("boolean", type_);
  return b_;
}
int64_t Value::as_int() const {
  if (type_ == Type::Int) return i_;
  if (type_ == Type::Double && std::nearbyint(d_) == d_ && std::fabs(d_) < 9.2e18) return int64_t(d_);
  type_error("integer", type_);
}
double Value::as_double() const {
  if (type_ == Type::Double) return d_;
  if (type_ == Type::Int) return double(i_);
  type_error("number", type_);
}
const std::string& Value::as_string() const {
  if (type_ != Type::String) type_error("string", type_);
  return s_;
}
const std::vector<Value>& Value::as_array() const {
  if (type_ != Type::Array) type_error("array", type_);
  return a_;
}
std::vector<Value>& Value::as_array() {
  if (type_ != Type::Array) type_error("array", type_);
  return a_;
}
const std::vector<std::pair<std::string, Value>>& Value::as_object() const {
  if (type_ != Type::Object) type_error("object", type_);
  return o_;
}
const Value* Value::find(const std::string& key) const {
  if (type_ != Type::Object) return nullptr;
  for (const auto& kv : o_)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
const Value& Value::at(const std::string& key) const {
  if (type_ != Type::Object) type_error("object", type_);
  if (const Value* v = find(key)) return *v;
  throw_input("json: missing key '", key, "'");
}
Value& Value::set(const std::string& key, Value v) {
  if (type_ != Type::Object) type_error("object", type_);
  for (auto& kv : o_)
    if (kv.first == key) {
      kv.second = std::move(v);
      return *this;
    }
  o_.emplace_back(key, std::move(v));
  return *this;
}
Value& Value::push(Value v) {
  if (type_ != Type::Array) type_error("array", type_);
  a_.push_back(std::move(v));
  return *this;
}

size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0)
      len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0)
      len = 4, cp = c & 0x07;
    else
      return i;
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return i;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

namespace {

class Parser {
 public:
  Parser(std::string_view t, int max_depth) : t_(t), max_depth_(max_depth) {}

  Value parse_document() {
    size_t bad = find_invalid_utf8(t_);
    if (bad != std::string_view::npos) {
      pos_ = bad;
      fail("invalid UTF-8");
    }
    skip_ws();
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != t_.size()) fail("unexpected trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const char* what) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < t_.size(); ++i) {
      if (t_[i] == '\n') ++line, col = 1;
      else
        ++col;
    }
    throw_input("json: ", what, " at line ", line, " column ", col);
  }
  bool eof() const { return pos_ >= t_.size(); }
  char peek() const { return eof() ? '\0' : t_[pos_]; }
  void skip_ws() {
    while (!eof() && (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' || t_[pos_] == '\r')) ++pos_;
  }
  void expect_word(const char* w) {
    size_t n = std::strlen(w);
    if (t_.substr(pos_, n) != w) fail("invalid literal");
    pos_ += n;
  }

  Value parse_value(int depth) {
    if (depth > max_depth_) fail("nesting too deep");
    if (eof()) fail("unexpected end of input");
    char c = peek();
    switch (c) {
      case '{': return parse_object(depth);
      case '[': return parse_array(depth);
      case '"': return Value(parse_string());
      case 't': expect_word("true"); return Value(true);
      case 'f': expect_word("false"); return Value(false);
      case 'n': expect_word("null"); return Value();
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
        fail("unexpected character");
    }
  }

  Value parse_object(int depth) {
    ++pos_;  // {
    Value obj = Value::object();
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return obj;
    }
    while (true) {
      skip_ws();
      if (peek() != '"') fail("expected a string key");
      const size_t key_pos = pos_;
      std::string key = parse_string();
      // Untrusted headers (safetensors) must not smuggle a second value under the same name.
      if (obj.find(key)) {
        pos_ = key_pos;
        fail(("duplicate key '" + key + "'").c_str());
      }
      skip_ws();
      if (peek() != ':') fail("expected ':'");
      ++pos_;
      skip_ws();
      obj.set(key, parse_value(depth + 1));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return obj;
      }
      fail("expected ',' or '}'");
    }
  }

  Value parse_array(int depth) {
    ++pos_;  // [
    Value arr = Value::array();
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return arr;
    }
    while (true) {
      skip_ws();
      arr.push(parse_value(depth + 1));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return arr;
      }
      fail("expected ',' or ']'");
    }
  }

  unsigned parse_hex4() {
    if (pos_ + 4 > t_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      char h = t_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= unsigned(h - '0');
      else if (h >= 'a' && h <= 'f')
        v |= unsigned(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        v |= unsigned(h - 'A' + 10);
      else
        fail("invalid \\u escape");
    }
    return v;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) out += char(cp);
    else if (cp < 0x800)
      out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
    else if (cp < 0x10000)
      out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
    else
      out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F)), out += char(0x80 | ((cp >> 6) & 0x3F)),
          out += char(0x80 | (cp & 0x3F));
  }

  std::string parse_string() {
    ++pos_;  // "
    std::string out;
    while (true) {
      if (eof()) fail("unterminated string");
      char c = t_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (eof()) fail("unterminated escape");
      char e = t_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = parse_hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (t_.substr(pos_, 2) != "\\u") fail("unpaired surrogate");
            pos_ += 2;
            uint32_t lo = parse_hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("invalid surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("invalid escape");
      }
    }
  }

  Value parse_number() {
    size_t start = pos_;
    bool is_float = false;
    if (peek() == '-') ++pos_;
    if (peek() == '0') ++pos_;
    else if (peek() >= '1' && peek() <= '9')
      while (peek() >= '0' && peek() <= '9') ++pos_;
    else
      fail("invalid number");
    if (peek() == '.') {
      is_float = true;
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("invalid number");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      is_float = true;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("invalid number");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    std::string num(t_.substr(start, pos_ - start));
    if (!is_float) {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(num.c_str(), &end, 10);
      if (errno == 0) return Value(int64_t(v));
      // Out of int64 range: keep it as a double.
    }
    return Value(std::strtod(num.c_str(), nullptr));
  }

  std::string_view t_;
  size_t pos_ = 0;
  int max_depth_;
};

void dump_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

void dump_into(std::string& out, const Value& v) {
  switch (v.type()) {
    case Value::Type::Null: out += "null"; break;
    case Value::Type::Bool: out += v.as_bool() ? "true" : "false"; break;
    case Value::Type::Int: out += std::to_string(v.as_int()); break;
    case Value::Type::Double: {
      double d = v.as_double();
      if (!std::isfinite(d)) throw_runtime("json: cannot write a non-finite number");
      // Shortest of 15..17 significant digits that reads back to the same double.
      char buf[40];
      for (int prec = 15; prec <= 17; ++prec) {
        snprintf(buf, sizeof(buf), "%.*g", prec, d);
        if (std::strtod(buf, nullptr) == d) break;
      }
      std::string s(buf);
      // Keep it a JSON number that reads back as a double, not an integer.
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      out += s;
      break;
    }
    case Value::Type::String: dump_string(out, v.as_string()); break;
    case Value::Type::Array: {
      out += '[';
      bool first = true;
      for (const auto& e : v.as_array()) {
        if (!first) out += ',';
        first = false;
        dump_into(out, e);
      }
      out += ']';
      break;
    }
    case Value::Type::Object: {
      out += '{';
      bool first = true;
      for (const auto& [k, e] : v.as_object()) {
        if (!first) out += ',';
        first = false;
        dump_string(out, k);
        out += ':';
        dump_into(out, e);
      }
      out += '}';
      break;
    }
  }
}

}  // namespace

Value parse(std::string_view text, int max_depth) { return Parser(text, max_depth).parse_document(); }

std::string dump(const Value& v) {
  std::string out;
  dump_into(out, v);
  return out;
}

}  // namespace wmtp::json
