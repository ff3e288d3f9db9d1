// An enum setting's spellings: the names a config choice() lists, mapped to and from the enum's
// values 0, 1, ... Light on purpose: headers that declare a setting's enum include this, not
// core/config.h, so that a change to the config reader rebuilds only what reads configs.
#pragma once
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace wmtp {

// The spelling of enum value `v` among the `names` its choice() lists (values 0, 1, ...): for logs and
// reports that name a setting's value as the TOML does.
template <class E>
const std::string& choice_name(const std::vector<std::string>& names, E v) {
  return names.at(size_t(v));
}
// And back, for a spelling read from elsewhere than the TOML (a checkpoint attribute); nullopt when
// `name` is none of them.
template <class E>
std::optional<E> choice_value(const std::vector<std::string>& names, const std::string& name) {
  const auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) return std::nullopt;
  return E(it - names.begin());
}

}  // namespace wmtp
