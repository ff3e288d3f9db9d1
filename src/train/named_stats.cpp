// Named step statistics (train/named_stats.h).
#include "train/named_stats.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/phase_timer.h"

namespace wmtp {

StatLayout& StatLayout::sum(const std::string& name, size_t size) { return declare(name, Reduce::Sum, size); }
StatLayout& StatLayout::max(const std::string& name, size_t size) { return declare(name, Reduce::Max, size); }

StatLayout& StatLayout::declare(const std::string& name, Reduce reduce, size_t size) {
  if (slots_.count(name)) throw_runtime("step statistics: '", name, "' declared twice");
  size_t& end = reduce == Reduce::Sum ? sum_size_ : max_size_;
  slots_[name] = Slot{reduce, end, size};
  end += size;
  return *this;
}

const StatLayout::Slot& StatLayout::slot(const std::string& name) const {
  auto it = slots_.find(name);
  if (it == slots_.end()) throw_runtime("step statistics: '", name, "' is not declared in the pipeline's layout");
  return it->second;
}

NamedStats StatLayout::make() const {
  NamedStats st;
  st.layout = this;
  st.sum.assign(sum_size_, 0.0);
  st.max.assign(max_size_, std::numeric_limits<double>::lowest());
  return st;
}

const double* NamedStats::run(const std::string& name, size_t* size) const {
  if (!layout) throw_runtime("step statistics: '", name, "' read from statistics without a layout");
  const StatLayout::Slot& s = layout->slot(name);
  const std::vector<double>& v = s.reduce == StatLayout::Reduce::Sum ? sum : max;
  if (v.size() < s.offset + s.size)
    throw_runtime("step statistics: '", name, "' lies beyond the ", v.size(), " values held");
  *size = s.size;
  return v.data() + s.offset;
}

double& NamedStats::at(const std::string& name, size_t i) {
  size_t n = 0;
  double* p = const_cast<double*>(run(name, &n));
  if (i >= n) throw_runtime("step statistics: '", name, "'[", i, "] out of its ", n, " slots");
  return p[i];
}

void NamedStats::check_read(const std::string& name) const {
  const StatLayout::Slot& s = layout->slot(name);
  for (const Pending& p : pending_)
    if (p.slot.reduce == s.reduce && p.slot.offset == s.offset)
      throw_runtime("step statistics: '", name,
                    "' is still on the device: it is read with the step's other figures "
                    "(read_pending), e.g. in finish_step's reduced statistics");
}

double NamedStats::get(const std::string& name, size_t i) const {
  size_t n = 0;
  const double* p = run(name, &n);
  check_read(name);
  if (i >= n) throw_runtime("step statistics: '", name, "'[", i, "] out of its ", n, " slots");
  return p[i];
}

std::vector<double> NamedStats::get_all(const std::string& name) const {
  size_t n = 0;
  const double* p = run(name, &n);
  check_read(name);
  return std::vector<double>(p, p + n);
}

void NamedStats::set(const std::string& name, const std::vector<double>& xs) {
  size_t n = 0;
  double* p = const_cast<double*>(run(name, &n));
  if (xs.size() != n) throw_runtime("step statistics: '", name, "' has ", n, " slots, given ", xs.size(), " values");
  std::copy(xs.begin(), xs.end(), p);
}

void NamedStats::set(const std::string& name, const at::Tensor& values) {
  size_t n = 0;
  run(name, &n);  // declared, and held
  if (!values.defined() || size_t(values.numel()) != n)
    throw_runtime("step statistics: '", name, "' has ", n, " slots, given a tensor of ",
                  values.defined() ? values.numel() : 0, " values");
  pending_.push_back(Pending{layout->slot(name), values.detach().reshape({-1})});
}

at::Tensor NamedStats::read_pending(PhaseTimer* timer, const at::Tensor& also) {
  if (pending_.empty() && !also.defined()) return {};
  std::vector<at::Tensor> parts;
  if (also.defined()) parts.push_back(also.detach().reshape({-1}).to(at::kDouble));
  for (const Pending& p : pending_) {
    // Everything is read from the first tensor's device (the step's), in one copy.
    const c10::Device dev = parts.empty() ? p.values.device() : parts.front().device();
    parts.push_back(p.values.to(dev, at::kDouble));
  }
  const at::Tensor host = read_to_host(timer, at::cat(parts)).contiguous();
  const double* h = host.data_ptr<double>();
  at::Tensor out;
  if (also.defined()) {
    out = host.narrow(0, 0, also.numel()).clone();
    h += also.numel();
  }
  for (const Pending& p : pending_) {
    const bool is_max = p.slot.reduce == StatLayout::Reduce::Max;
    std::vector<double>& v = is_max ? max : sum;
    if (v.size() < p.slot.offset + p.slot.size)
      throw_runtime("step statistics: a pending value lies beyond ", v.size());
    for (size_t i = 0; i < p.slot.size; ++i, ++h) {
      double& x = v[p.slot.offset + i];
      x = is_max ? std::max(x, *h) : x + *h;
    }
  }
  pending_.clear();
  return out;
}

void NamedStats::accumulate(const NamedStats& o) {
  if (layout && o.layout && layout != o.layout)
    throw_runtime("step statistics: accumulating statistics of two different layouts");
  if (!layout) layout = o.layout;
  auto add = [](std::vector<double>& a, const std::vector<double>& b, bool take_max) {
    if (b.empty()) return;
    if (a.empty()) {
      a = b;
      return;
    }
    if (a.size() != b.size()) throw_runtime("step statistics: ", a.size(), " vs ", b.size(), " entries");
    for (size_t i = 0; i < a.size(); ++i) a[i] = take_max ? std::max(a[i], b[i]) : a[i] + b[i];
  };
  add(sum, o.sum, false);
  add(max, o.max, true);
  tokens += o.tokens;
  flops += o.flops;
  pending_.insert(pending_.end(), o.pending_.begin(), o.pending_.end());
}

}  // namespace wmtp
