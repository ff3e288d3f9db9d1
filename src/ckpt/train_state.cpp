// TrainState accessors and byte serialization (see train_state.h).
#include "ckpt/train_state.h"

#include <cstring>

#include "core/error.h"

namespace wmtp {

const char* train_value_type(const TrainState::Value& v) {
  static const char* names[] = {"int64", "double", "string", "int64[]", "double[]", "uint8[]"};
  return names[v.index()];
}

void TrainState::set(const std::string& key, Value v) {
  if (key.empty() || key.find('/') != std::string::npos)
    throw_usage("train state key '", key, "' is invalid (non-empty, no '/')");
  values_[key] = std::move(v);
}

const TrainState::Value& TrainState::find(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) throw_input("checkpoint /train has no key '", key, "'");
  return it->second;
}

namespace {
template <class T>
const T& get_as(const TrainState::Value& v, const std::string& key, const char* want) {
  if (const T* p = std::get_if<T>(&v)) return *p;
  throw_input("checkpoint /train key '", key, "' holds ", train_value_type(v), ", expected ", want);
}
}  // namespace

int64_t TrainState::get_int(const std::string& key) const { return get_as<int64_t>(find(key), key, "int64"); }
double TrainState::get_double(const std::string& key) const {
  const Value& v = find(key);
  if (const int64_t* i = std::get_if<int64_t>(&v)) return double(*i);
  return get_as<double>(v, key, "double");
}
const std::string& TrainState::get_string(const std::string& key) const {
  return get_as<std::string>(find(key), key, "string");
}
const std::vector<int64_t>& TrainState::get_ints(const std::string& key) const {
  return get_as<std::vector<int64_t>>(find(key), key, "int64[]");
}
const std::vector<double>& TrainState::get_doubles(const std::string& key) const {
  return get_as<std::vector<double>>(find(key), key, "double[]");
}
const std::vector<uint8_t>& TrainState::get_bytes(const std::string& key) const {
  return get_as<std::vector<uint8_t>>(find(key), key, "uint8[]");
}
int64_t TrainState::get_int_or(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}
double TrainState::get_double_or(const std::string& key, double fallback) const {
  return has(key) ? get_double(key) : fallback;
}

std::vector<std::string> TrainState::keys() const {
  std::vector<std::string> k;
  for (const auto& [key, v] : values_) k.push_back(key);
  return k;
}

// Format: per entry u8 type index, u64 key length, key, u64 payload bytes, payload.
namespace {
void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
void put_bytes(std::string& out, const void* p, size_t n) {
  put_u64(out, n);
  out.append(static_cast<const char*>(p), n);
}
}  // namespace

std::string TrainState::serialize() const {
  std::string out;
  for (const auto& [key, v] : values_) {
    out.push_back(char(v.index()));
    put_bytes(out, key.data(), key.size());
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_arithmetic_v<T>) put_bytes(out, &x, sizeof(x));
          else
            put_bytes(out, x.data(), x.size() * sizeof(x[0]));
        },
        v);
  }
  return out;
}

TrainState TrainState::deserialize(const std::string& bytes) {
  TrainState st;
  size_t pos = 0;
  auto take = [&](size_t n) {
    if (bytes.size() - pos < n) throw_runtime("corrupt serialized train state");
    const char* p = bytes.data() + pos;
    pos += n;
    return p;
  };
  auto take_block = [&](std::string& out) {
    uint64_t n;
    std::memcpy(&n, take(8), 8);
    out.assign(take(n), n);
  };
  while (pos < bytes.size()) {
    int type = static_cast<unsigned char>(*take(1));
    std::string key, payload;
    take_block(key);
    take_block(payload);
    auto vec = [&](auto tag) {
      using E = decltype(tag);
      std::vector<E> v(payload.size() / sizeof(E));
      std::memcpy(v.data(), payload.data(), v.size() * sizeof(E));
      return v;
    };
    switch (type) {
      case 0: {
        int64_t x;
        std::memcpy(&x, payload.data(), 8);
        st.values_[key] = x;
        break;
      }
      case 1: {
        double x;
        std::memcpy(&x, payload.data(), 8);
        st.values_[key] = x;
        break;
      }
      case 2: st.values_[key] = payload; break;
      case 3: st.values_[key] = vec(int64_t{}); break;
      case 4: st.values_[key] = vec(double{}); break;
      case 5: st.values_[key] = vec(uint8_t{}); break;
      default: throw_runtime("corrupt serialized train state (type ", type, ")");
    }
  }
  return st;
}

}  // namespace wmtp
