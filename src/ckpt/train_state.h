// TrainState: the typed key/value store behind a checkpoint's /train group. The trainer and the
// pipelines put whatever they need to resume exactly (step, consumed samples, data cursor, LR
// schedule state, TD EMA statistics, ...) under their own keys; the checkpoint writes one HDF5
// dataset per key, so `h5ls -r` shows them by name. RNG streams are not saved: the trainer reseeds
// them from (seed, step, rank) every step (train/checkpointed.h).
//
// Value types: int64, double, string, and 1-D arrays of int64, double and uint8 (raw bytes).
// Keys: non-empty, no '/' (use dots: "td_ema.mean"). Every rank holds the
// same values: the state is written by rank 0 and is the same on every rank after loading.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace wmtp {

class TrainState {
 public:
  using Value =
      std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>, std::vector<uint8_t>>;

  void set_int(const std::string& key, int64_t v) { set(key, v); }
  void set_double(const std::string& key, double v) { set(key, v); }
  void set_string(const std::string& key, std::string v) { set(key, std::move(v)); }
  void set_ints(const std::string& key, std::vector<int64_t> v) { set(key, std::move(v)); }
  void set_doubles(const std::string& key, std::vector<double> v) { set(key, std::move(v)); }
  void set_bytes(const std::string& key, std::vector<uint8_t> v) { set(key, std::move(v)); }

  // Getters throw Error(Input) naming the key when it is missing or holds another type
  // ("checkpoint /train has no key 'x'"); the *_or forms return `fallback` when missing.
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;  // an int64 value is accepted
  const std::string& get_string(const std::string& key) const;
  const std::vector<int64_t>& get_ints(const std::string& key) const;
  const std::vector<double>& get_doubles(const std::string& key) const;
  const std::vector<uint8_t>& get_bytes(const std::string& key) const;
  int64_t get_int_or(const std::string& key, int64_t fallback) const;
  double get_double_or(const std::string& key, double fallback) const;

  bool has(const std::string& key) const { return values_.count(key) != 0; }
  void erase(const std::string& key) { values_.erase(key); }
  std::vector<std::string> keys() const;  // sorted
  const std::map<std::string, Value>& values() const { return values_; }
  bool operator==(const TrainState& o) const { return values_ == o.values_; }

  // Byte serialization (for broadcasting rank 0's state before a collective write).
  std::string serialize() const;
  static TrainState deserialize(const std::string& bytes);

  void set(const std::string& key, Value v);

 private:
  const Value& find(const std::string& key) const;
  std::map<std::string, Value> values_;
};

// Human-readable type name of a value ("int64", "double[]", ...).
const char* train_value_type(const TrainState::Value& v);

}  // namespace wmtp
