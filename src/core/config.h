// Configuration: TOML file -> small typed config structs, one per component.
//
// Each component owns a struct whose member initializers are its defaults (the one place they live)
// and a visit() that names its fields:
//
//   struct OptimizerConfig {
//     enum class Kind { AdamW };
//     double lr = 1e-5;
//     Kind kind = Kind::AdamW;
//     template <class V> void visit(V& v) {
//       v.field("lr", lr, "peak learning rate");
//       v.choice("kind", kind, {"adamw"}, "optimizer");  // the enum's values in order, as in the TOML
//     }
//   };
//
// A setting with a fixed set of values is an enum in its struct, parsed once when the file is read:
// the code compares enums, never the TOML's strings.
//
// A program registers the sections it uses in a ConfigSet (`set.add("optimizer", opt_cfg)`), then
// loads a file and applies `--set section.key=value` overrides. The ConfigSet writes straight into
// the registered structs, so it must not outlive them. Rules: unknown sections and keys are errors
// naming the nearest valid key; types are checked (an integer is accepted where a float is expected,
// nothing else converts); every number must fit float32 (finite, not rounding to 0 or infinity:
// every setting ends up in float32 arithmetic somewhere); a TOML syntax error names file:line:column;
// to_toml() prints the fully resolved configuration and parses back to the same values.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/choice_names.h"

namespace wmtp {

class ConfigSet {
 public:
  enum class Type { Bool, Int32, Int64, Double, String, StringList, DoubleList, Int64List, Enum };

  // Binder handed to a struct's visit(); records where each field lives.
  class Binder {
   public:
    void field(const char* key, bool& v, const char* doc) { add(key, Type::Bool, &v, doc); }
    void field(const char* key, int& v, const char* doc) { add(key, Type::Int32, &v, doc); }
    void field(const char* key, int64_t& v, const char* doc) { add(key, Type::Int64, &v, doc); }
    void field(const char* key, double& v, const char* doc) { add(key, Type::Double, &v, doc); }
    void field(const char* key, std::string& v, const char* doc) { add(key, Type::String, &v, doc); }
    // A string that to_toml() prints as `shown(value)`: a URI whose credentials must not reach a
    // terminal or a file (the value itself is untouched).
    void field(const char* key, std::string& v, const char* doc, std::string (*shown)(const std::string&)) {
      add(key, Type::String, &v, doc);
      set_->fields_.back().shown = shown;
    }
    void field(const char* key, std::vector<std::string>& v, const char* doc) { add(key, Type::StringList, &v, doc); }
    void field(const char* key, std::vector<double>& v, const char* doc) { add(key, Type::DoubleList, &v, doc); }
    void field(const char* key, std::vector<int64_t>& v, const char* doc) { add(key, Type::Int64List, &v, doc); }
    // An enum whose values 0, 1, ... are spelled `names[0]`, `names[1]`, ... in the TOML.
    template <class E>
    void choice(const char* key, E& v, std::vector<std::string> names, const char* doc) {
      static_assert(std::is_enum_v<E>, "choice(): an enum with values 0, 1, ... in the order of `names`");
      add_enum(
          key, doc, std::move(names), [&v] { return size_t(v); }, [&v](size_t i) { v = E(i); });
    }
    // Any enum (torch's ScalarType too), each value with its spelling, listed in the order the
    // messages and --help show them.
    template <class E>
    void choice(const char* key, E& v, std::initializer_list<std::pair<const char*, E>> named, const char* doc) {
      static_assert(std::is_enum_v<E>, "choice(): an enum");
      std::vector<std::string> names;
      std::vector<E> values;
      for (const auto& [name, value] : named) names.push_back(name), values.push_back(value);
      add_enum(
          key, doc, std::move(names),
          [&v, values] { return size_t(std::find(values.begin(), values.end(), v) - values.begin()); },
          [&v, values](size_t i) { v = values.at(i); });
    }

   private:
    friend class ConfigSet;
    Binder(ConfigSet* set, std::string section) : set_(set), section_(std::move(section)) {}
    void add(const char* key, Type type, void* ptr, const char* doc, std::vector<std::string> choices = {});
    void add_enum(const char* key, const char* doc, std::vector<std::string> names, std::function<size_t()> index,
                  std::function<void(size_t)> set_index);
    ConfigSet* set_;
    std::string section_;
  };

  ConfigSet() = default;
  ConfigSet(const ConfigSet&) = delete;  // holds pointers into the registered structs
  ConfigSet& operator=(const ConfigSet&) = delete;

  template <class C>
  void add(const std::string& section, C& cfg) {
    Binder b(this, section);
    cfg.visit(b);
    sections_.push_back(section);
  }

  // Throws Error(Usage) naming file:line:column for syntax errors, the key for unknown keys/types.
  // A file this rank cannot open or read is a Local error: with several ranks, call it inside agreed().
  void load_file(const std::string& path);
  void load_string(const std::string& toml_text, const std::string& source_name);
  // "section.key=value"; value is TOML (strings may be given bare).
  void apply_override(const std::string& assignment);
  void apply_overrides(const std::vector<std::string>& assignments);

  std::string to_toml() const;   // the fully resolved configuration (fields with `shown` as shown)
  std::string describe() const;  // every key with its default/current value and doc (for --help)
  const std::vector<std::string>& sections() const { return sections_; }

 private:
  struct Field {
    std::string section, key, doc;
    Type type;
    void* ptr;
    std::vector<std::string> choices;
    std::function<size_t()> index;                       // Enum: the position of the value in `choices`
    std::function<void(size_t)> set_index;               // Enum: set the value to `choices[i]`'s
    std::string (*shown)(const std::string&) = nullptr;  // String: what to_toml() prints instead
  };
  const Field* find(const std::string& section, const std::string& key) const;
  std::string suggest(const std::string& section, const std::string& key) const;

  std::vector<Field> fields_;
  std::vector<std::string> sections_;
};

// Edit distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace wmtp
