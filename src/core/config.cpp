// ConfigSet implementation over TOML++: loading with type checks and nearest-key suggestions,
// --set overrides, and printing the resolved TOML.
#include "core/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <toml++/toml.h>

#include "core/error.h"

namespace wmtp {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

void ConfigSet::Binder::add(const char* key, Type type, void* ptr, const char* doc, std::vector<std::string> choices) {
  WMTP_CHECK(set_->find(section_, key) == nullptr, "config key [", section_, "] ", key, " registered twice");
  set_->fields_.push_back(Field{section_, key, doc, type, ptr, std::move(choices), {}, {}});
}

void ConfigSet::Binder::add_enum(const char* key, const char* doc, std::vector<std::string> names,
                                 std::function<size_t()> index, std::function<void(size_t)> set_index) {
  add(key, Type::Enum, nullptr, doc, std::move(names));
  set_->fields_.back().index = std::move(index);
  set_->fields_.back().set_index = std::move(set_index);
}

const ConfigSet::Field* ConfigSet::find(const std::string& section, const std::string& key) const {
  for (const auto& f : fields_)
    if (f.section == section && f.key == key) return &f;
  return nullptr;
}

std::string ConfigSet::suggest(const std::string& section, const std::string& key) const {
  // Prefer a key of the same section; a key that exists verbatim in another section wins outright.
  for (const auto& f : fields_)
    if (f.key == key && f.section != section) return "did you mean [" + f.section + "] " + f.key + "?";
  const Field* best = nullptr;
  size_t best_d = ~size_t(0);
  for (const auto& f : fields_) {
    if (f.section != section) continue;
    size_t d = edit_distance(f.key, key);
    if (d < best_d) best_d = d, best = &f;
  }
  if (best) return "did you mean '" + best->key + "'?";
  return "section [" + section + "] has no keys";
}

namespace {

const char* type_name(ConfigSet::Type t) {
  switch (t) {
    case ConfigSet::Type::Bool: return "a boolean (true/false)";
    case ConfigSet::Type::Int32:
    case ConfigSet::Type::Int64: return "an integer";
    case ConfigSet::Type::Double: return "a number";
    case ConfigSet::Type::String:
    case ConfigSet::Type::Enum: return "a string";
    case ConfigSet::Type::StringList: return "an array of strings";
    case ConfigSet::Type::DoubleList: return "an array of numbers";
    case ConfigSet::Type::Int64List: return "an array of integers";
  }
  return "?";
}

std::string where(const toml::node& n) {
  const auto& src = n.source();
  std::ostringstream os;
  if (src.path) os << *src.path << ":";
  os << src.begin.line << ":" << src.begin.column;
  return os.str();
}

std::string describe_node(const toml::node& n) {
  std::ostringstream os;
  if (n.is_string()) os << '"' << *n.value<std::string>() << '"';
  else if (n.is_table())
    os << "a table";
  else if (n.is_array())
    os << "an array";
  else if (auto i = n.value_exact<int64_t>())
    os << "the integer " << *i;
  else if (auto d = n.value_exact<double>())
    os << "the number " << *d;
  else if (auto b = n.value_exact<bool>())
    os << (*b ? "true" : "false");
  else
    os << "a date/time";
  return os.str();
}

// TOML spells inf and nan; no setting means either, and a NaN lr or clip norm would otherwise run
// silently (every comparison with NaN is false, so range checks let it through).
// Every number a run reads ends up in float32 arithmetic somewhere (weights, losses, optimizer
// state, scales): one whose float32 image is infinite, or zero while it is not, would overflow or
// vanish at step 1 and read as a numerical failure. No setting needs such a value: refuse it here,
// for every key at once.
bool read_number(const toml::node& x, double& out, const std::string& name, const std::string& ctx) {
  if (auto d = x.value_exact<double>()) out = *d;
  else if (auto i = x.value_exact<int64_t>())
    out = double(*i);
  else
    return false;
  if (!std::isfinite(out)) throw_usage(ctx, ": config key ", name, " = ", out, ": expected a finite number");
  if (std::fabs(out) > double(std::numeric_limits<float>::max()))
    throw_usage(ctx, ": config key ", name, " = ", out,
                " is out of range: numbers are used in float32, whose "
                "largest magnitude is ",
                std::numeric_limits<float>::max(), " (", out, " would overflow to infinity)");
  if (out != 0.0 && float(out) == 0.0f)
    throw_usage(ctx, ": config key ", name, " = ", out,
                " is out of range: numbers are used in float32, whose "
                "smallest non-zero magnitude is ",
                std::numeric_limits<float>::denorm_min(), " (", out, " would round to 0)");
  return true;
}

template <class V>
bool read_exact(const toml::node& x, V& out) {
  const auto v = x.value_exact<V>();
  if (v) out = *v;
  return bool(v);
}

// Every element through `read`: false at the first of the wrong type, and then `ptr` is left as it was.
template <class V, class Read>
bool read_list(const toml::array& arr, void* ptr, Read read) {
  std::vector<V> vs;
  for (const auto& e : arr) {
    V v;
    if (!read(e, v)) return false;
    vs.push_back(std::move(v));
  }
  *static_cast<std::vector<V>*>(ptr) = std::move(vs);
  return true;
}

}  // namespace

// Assign one TOML node to a field, checking its type; `ctx` names where the value came from.
// `set_index` sets an Enum field to its i-th choice.
static void assign(const ConfigSet::Type type, void* ptr, const std::vector<std::string>& choices,
                   const std::function<void(size_t)>& set_index, const std::string& name, const toml::node& n,
                   const std::string& ctx) {
  using T = ConfigSet::Type;
  auto bad = [&]() {
    throw_usage(ctx, ": config key ", name, " expects ", type_name(type), ", got ", describe_node(n));
  };
  auto as_double = [&](const toml::node& x, double& out) { return read_number(x, out, name, ctx); };
  switch (type) {
    case T::Bool: {
      auto v = n.value_exact<bool>();
      if (!v) bad();
      *static_cast<bool*>(ptr) = *v;
      break;
    }
    case T::Int32:
    case T::Int64: {
      auto v = n.value_exact<int64_t>();
      if (!v) bad();
      if (type == T::Int32) {
        if (*v < INT32_MIN || *v > INT32_MAX) throw_usage(ctx, ": config key ", name, " = ", *v, " is out of range");
        *static_cast<int*>(ptr) = int(*v);
      } else {
        *static_cast<int64_t*>(ptr) = *v;
      }
      break;
    }
    case T::Double: {
      double d;
      if (!as_double(n, d)) bad();
      *static_cast<double*>(ptr) = d;
      break;
    }
    case T::String:
    case T::Enum: {
      auto v = n.value_exact<std::string>();
      if (!v) bad();
      const auto it = std::find(choices.begin(), choices.end(), *v);
      if (!choices.empty() && it == choices.end()) {
        std::string all;
        for (const auto& c : choices) all += (all.empty() ? "" : ", ") + c;
        throw_usage(ctx, ": config key ", name, " = \"", *v, "\" is not one of: ", all);
      }
      if (type == T::Enum) set_index(size_t(it - choices.begin()));
      else
        *static_cast<std::string*>(ptr) = *v;
      break;
    }
    case T::StringList:
    case T::DoubleList:
    case T::Int64List: {
      const toml::array* arr = n.as_array();
      if (!arr) bad();
      const bool read = type == T::StringList   ? read_list<std::string>(*arr, ptr, read_exact<std::string>)
                        : type == T::DoubleList ? read_list<double>(*arr, ptr, as_double)
                                                : read_list<int64_t>(*arr, ptr, read_exact<int64_t>);
      if (!read) bad();
      break;
    }
  }
}

void ConfigSet::load_string(const std::string& text, const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(std::string_view(text), std::string_view(source_name));
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw_usage(source_name, ":", b.line, ":", b.column, ": TOML syntax error: ", e.description());
  }
  for (const auto& [sec_key, sec_node] : root) {
    std::string section(sec_key.str());
    const toml::table* tbl = sec_node.as_table();
    if (!tbl) {
      throw_usage(where(sec_node), ": top-level key '", section,
                  "' must be a [section]; keys belong in one of the sections");
    }
    if (std::find(sections_.begin(), sections_.end(), section) == sections_.end()) {
      std::string best;
      size_t best_d = ~size_t(0);
      for (const auto& s : sections_) {
        size_t d = edit_distance(s, section);
        if (d < best_d) best_d = d, best = s;
      }
      std::string all;
      for (const auto& s : sections_) all += (all.empty() ? "" : " ") + ("[" + s + "]");
      throw_usage(where(sec_node), ": unknown section [", section, "]",
                  best.empty() ? "" : "; did you mean [" + best + "]?", " (this program reads: ", all, ")");
    }
    for (const auto& [key, node] : *tbl) {
      std::string k(key.str());
      const Field* f = find(section, k);
      if (!f) throw_usage(where(node), ": unknown key [", section, "] ", k, "; ", suggest(section, k));
      assign(f->type, f->ptr, f->choices, f->set_index, section + "." + k, node, where(node));
    }
  }
}

void ConfigSet::load_file(const std::string& path) {
  // What this rank's file system shows (a node-local path may exist on one node only): Local errors,
  // which the caller agrees on across ranks.
  auto local_usage = [](const auto&... args) { throw Error(ErrorKind::Usage, detail::concat(args...), Reach::Local); };
  // An ifstream opens a directory without complaint and reads nothing: that would be an empty config.
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(st)) local_usage("config file '", path, "' is a directory, not a TOML file");
  std::ifstream in(path);
  if (!in) local_usage("cannot open config file '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) local_usage("cannot read config file '", path, "'");
  load_string(ss.str(), path);
}

void ConfigSet::apply_override(const std::string& assignment) {
  auto eq = assignment.find('=');
  auto dot = assignment.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    throw_usage("--set '", assignment, "': expected section.key=value");
  std::string section = assignment.substr(0, dot);
  std::string key = assignment.substr(dot + 1, eq - dot - 1);
  std::string value = assignment.substr(eq + 1);
  std::string ctx = "--set " + assignment;
  if (std::find(sections_.begin(), sections_.end(), section) == sections_.end())
    throw_usage(ctx, ": unknown section [", section, "]");
  const Field* f = find(section, key);
  if (!f) throw_usage(ctx, ": unknown key [", section, "] ", key, "; ", suggest(section, key));

  // Strings may be given bare (--set data.path=/a/b); everything else is parsed as a TOML value.
  toml::table parsed;
  bool is_string = f->type == Type::String || f->type == Type::Enum;
  std::string text = value;
  if (is_string && !(value.size() >= 2 && (value.front() == '"' || value.front() == '\''))) {
    toml::table t;
    t.insert("v", value);
    std::ostringstream os;
    os << t;
    text = os.str().substr(os.str().find('=') + 1);
  }
  try {
    parsed = toml::parse(std::string_view(std::string("v = ") + text), std::string_view("--set"));
  } catch (const toml::parse_error& e) {
    throw_usage(ctx, ": cannot parse value '", value, "' as ", type_name(f->type), " (", e.description(), ")");
  }
  assign(f->type, f->ptr, f->choices, f->set_index, section + "." + key, *parsed.get("v"), ctx);
}

void ConfigSet::apply_overrides(const std::vector<std::string>& assignments) {
  for (const auto& a : assignments) apply_override(a);
}

std::string ConfigSet::to_toml() const {
  std::ostringstream os;
  for (const auto& section : sections_) {
    toml::table tbl;
    for (const auto& f : fields_) {
      if (f.section != section) continue;
      switch (f.type) {
        case Type::Bool: tbl.insert(f.key, *static_cast<bool*>(f.ptr)); break;
        case Type::Int32: tbl.insert(f.key, int64_t(*static_cast<int*>(f.ptr))); break;
        case Type::Int64: tbl.insert(f.key, *static_cast<int64_t*>(f.ptr)); break;
        case Type::Double: tbl.insert(f.key, *static_cast<double*>(f.ptr)); break;
        case Type::String: {
          const std::string& v = *static_cast<std::string*>(f.ptr);
          tbl.insert(f.key, f.shown ? f.shown(v) : v);
          break;
        }
        case Type::Enum: tbl.insert(f.key, f.choices.at(f.index())); break;
        case Type::StringList: {
          toml::array a;
          for (const auto& s : *static_cast<std::vector<std::string>*>(f.ptr)) a.push_back(s);
          tbl.insert(f.key, a);
          break;
        }
        case Type::DoubleList: {
          toml::array a;
          for (double d : *static_cast<std::vector<double>*>(f.ptr)) a.push_back(d);
          tbl.insert(f.key, a);
          break;
        }
        case Type::Int64List: {
          toml::array a;
          for (int64_t i : *static_cast<std::vector<int64_t>*>(f.ptr)) a.push_back(i);
          tbl.insert(f.key, a);
          break;
        }
      }
    }
    os << "[" << section << "]\n";
    // Keep registration order (toml++ sorts keys): print key by key.
    for (const auto& f : fields_) {
      if (f.section != section) continue;
      toml::table one;
      one.insert(f.key, *tbl.get(f.key));
      os << one << "\n";
    }
    os << "\n";
  }
  return os.str();
}

std::string ConfigSet::describe() const {
  // Reuse the TOML printer for values, then append the doc strings as comments.
  std::ostringstream os;
  std::istringstream resolved(to_toml());
  std::string line;
  std::string section;
  while (std::getline(resolved, line)) {
    if (line.empty()) {
      os << "\n";
      continue;
    }
    if (line.front() == '[') {
      section = line.substr(1, line.size() - 2);
      os << line << "\n";
      continue;
    }
    std::string key = line.substr(0, line.find(' '));
    const Field* f = find(section, key);
    os << "  " << line;
    if (f && !f->doc.empty()) os << "    # " << f->doc;
    if (f && !f->choices.empty()) {
      os << " (";
      for (size_t i = 0; i < f->choices.size(); ++i) os << (i ? "|" : "") << f->choices[i];
      os << ")";
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace wmtp
