// PhaseTimer: wall-clock intervals here, CUDA event pairs in phase_timer_cuda.cpp.
#include "core/phase_timer.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <iterator>
#include <optional>

#include "core/error.h"
#include "core/phase_timer_cuda.h"

namespace wmtp {

using Clock = std::chrono::steady_clock;

constexpr bool listed_in_enum_order() {
  for (size_t i = 0; i < std::size(kStepPhases); ++i)
    if (static_cast<size_t>(kStepPhases[i].phase) != i) return false;
  return true;
}
static_assert(listed_in_enum_order(), "kStepPhases is indexed by Phase: list it in the enum's order");

struct PhaseTimer::Open {
  int phase = 0;
  bool on_device = false;  // CUDA event pair rather than the wall clock
  Clock::time_point start;
  void* start_event = nullptr;
  std::optional<at::RecordFunction> range;  // the profiler's view of the interval, when one records
};

struct PhaseTimer::Pending {
  int phase = 0;
  void* start = nullptr;
  void* end = nullptr;
};

PhaseTimer::PhaseTimer(int64_t heads, c10::Device device) : heads_(heads), device_(device) {
  first_.assign(std::size(kStepPhases), -1);
  for (const PhaseSpec& p : kStepPhases) {
    first_[static_cast<size_t>(p.phase)] = static_cast<int>(names_.size());
    const int64_t n = p.phase == Phase::Head ? heads : 1;
    for (int64_t k = 0; k < n; ++k) {
      names_.push_back(p.phase == Phase::Head ? p.name + std::to_string(k) : std::string(p.name));
      phase_of_.push_back(p.phase);
    }
  }
  seconds_.assign(names_.size(), 0.0);
  counts_.assign(names_.size(), 0);
#ifndef WMTP_WITH_CUDA
  if (device_.is_cuda()) throw_runtime("PhaseTimer: a CUDA device in a build without CUDA");
#endif
}

PhaseTimer::~PhaseTimer() {
#ifdef WMTP_WITH_CUDA
  for (const Pending& p : pending_) {
    phase_cuda::destroy_event(p.start);
    phase_cuda::destroy_event(p.end);
  }
  for (const auto& o : open_)
    if (o && o->start_event) phase_cuda::destroy_event(o->start_event);
  for (void* e : event_pool_) phase_cuda::destroy_event(e);
#endif
}

int PhaseTimer::index_of(Phase phase, int64_t head) const {
  const int first = first_.at(static_cast<size_t>(phase));
  if (phase != Phase::Head) return first;
  WMTP_CHECK(head >= 0 && head < heads_, "PhaseTimer: head ", head, " of a model with ", heads_, " heads");
  return first + static_cast<int>(head);
}

void PhaseTimer::set_paused(bool paused) {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = paused;
}

int PhaseTimer::begin(Phase phase, int64_t head, PhaseClock clock) {
  const int index = index_of(phase, head);
  auto o = std::make_unique<Open>();
  o->phase = index;
  o->range.emplace(at::RecordScope::USER_SCOPE);
  if (o->range->isActive())
    o->range->before(names_[static_cast<size_t>(index)].c_str(), c10::ArrayRef<const c10::IValue>{});
  else
    o->range.reset();
  std::lock_guard<std::mutex> lock(mu_);
  if (paused_) return -1;
  o->on_device = clock == PhaseClock::Device && device_.is_cuda();
#ifdef WMTP_WITH_CUDA
  if (o->on_device) {
    if (event_pool_.empty()) event_pool_.push_back(phase_cuda::create_event());
    o->start_event = event_pool_.back();
    event_pool_.pop_back();
    phase_cuda::record(o->start_event);
  }
#endif
  o->start = Clock::now();
  for (size_t i = 0; i < open_.size(); ++i)
    if (!open_[i]) {
      open_[i] = std::move(o);
      return static_cast<int>(i);
    }
  open_.push_back(std::move(o));
  return static_cast<int>(open_.size() - 1);
}

void PhaseTimer::end(int token) {
  std::unique_ptr<Open> o;
  {
    std::lock_guard<std::mutex> lock(mu_);
    WMTP_CHECK(token >= 0 && static_cast<size_t>(token) < open_.size() && open_[static_cast<size_t>(token)],
               "PhaseTimer: end() of an interval that is not open");
    o = std::move(open_[static_cast<size_t>(token)]);
    const size_t p = static_cast<size_t>(o->phase);
    counts_[p] += 1;
    if (!o->on_device) {
      seconds_[p] += std::chrono::duration<double>(Clock::now() - o->start).count();
    } else {
#ifdef WMTP_WITH_CUDA
      if (event_pool_.empty()) event_pool_.push_back(phase_cuda::create_event());
      void* end_event = event_pool_.back();
      event_pool_.pop_back();
      phase_cuda::record(end_event);
      pending_.push_back(Pending{o->phase, o->start_event, end_event});
      // A long log interval must not pile up events: read the pairs the GPU has passed already.
      if (pending_.size() >= 4096) fold_finished(/*wait=*/false);
#endif
    }
  }
  o->range.reset();  // ends the profiler's range (outside the lock: it runs the profiler's callbacks)
}

void PhaseTimer::fold_finished(bool wait) {
#ifdef WMTP_WITH_CUDA
  std::vector<Pending> left;
  for (const Pending& p : pending_) {
    if (!wait && !phase_cuda::finished(p.end)) {
      left.push_back(p);
      continue;
    }
    seconds_[static_cast<size_t>(p.phase)] += phase_cuda::elapsed_seconds(p.start, p.end);
    event_pool_.push_back(p.start);
    event_pool_.push_back(p.end);
  }
  pending_.swap(left);
#endif
}

std::vector<PhaseTotal> PhaseTimer::take() {
  std::lock_guard<std::mutex> lock(mu_);
  fold_finished(/*wait=*/true);
  std::vector<PhaseTotal> out;
  for (size_t i = 0; i < names_.size(); ++i)
    out.push_back(PhaseTotal{names_[i], phase_of_[i], kStepPhases[static_cast<size_t>(phase_of_[i])].top_level,
                             seconds_[i], counts_[i]});
  std::fill(seconds_.begin(), seconds_.end(), 0.0);
  std::fill(counts_.begin(), counts_.end(), 0);
  return out;
}

at::Tensor read_to_host(PhaseTimer* timer, const at::Tensor& t) {
  PhaseScope sync(timer, Phase::HostSync, PhaseClock::Host);
  return t.to(at::kCPU);
}

}  // namespace wmtp
