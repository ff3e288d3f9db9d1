// Activation checkpointing as a custom autograd function with a re-entrant backward.
#include "model/activation_checkpoint.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>

namespace wmtp {

namespace {

// Carries the unit's function (and the RNG states of its forward) through the autograd context;
// IValue capsules are the only way to keep an arbitrary C++ object there.
struct UnitFnHolder : torch::CustomClassHolder {
  UnitFn fn;
  bool preserve_rng = false;
  at::Tensor cpu_rng, device_rng;
  c10::optional<at::Device> device;
};

at::Tensor generator_state(const at::Device& device) {
  at::Generator gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_generator_state(const at::Device& device, const at::Tensor& state) {
  at::Generator gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// Puts the forward's RNG states in place for the recompute and restores the current ones after,
// so the recompute neither changes its own dropout masks nor the stream seen by later code.
class RngFork {
 public:
  explicit RngFork(const UnitFnHolder& h) : h_(h) {
    if (!h_.preserve_rng) return;
    cpu_now_ = generator_state(at::Device(at::kCPU));
    set_generator_state(at::Device(at::kCPU), h_.cpu_rng);
    if (h_.device) {
      device_now_ = generator_state(*h_.device);
      set_generator_state(*h_.device, h_.device_rng);
    }
  }
  ~RngFork() {
    if (!h_.preserve_rng) return;
    set_generator_state(at::Device(at::kCPU), cpu_now_);
    if (h_.device) set_generator_state(*h_.device, device_now_);
  }

 private:
  const UnitFnHolder& h_;
  at::Tensor cpu_now_, device_now_;
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, at::Tensor anchor,
                            c10::intrusive_ptr<UnitFnHolder> holder) {
    if (holder->preserve_rng) {
      holder->cpu_rng = generator_state(at::Device(at::kCPU));
      if (!x.is_cpu()) {
        holder->device = x.device();
        holder->device_rng = generator_state(x.device());
      }
    }
    ctx->save_for_backward({x});
    ctx->saved_data["x_requires_grad"] = x.requires_grad();
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    c10::NoGradGuard no_grad;
    return holder->fn(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::Tensor x = ctx->get_saved_variables()[0];
    const bool x_requires_grad = ctx->saved_data["x_requires_grad"].toBool();
    auto holder = c10::static_intrusive_pointer_cast<UnitFnHolder>(ctx->saved_data["fn"].toCapsule());
    at::Tensor xd = x.detach();
    if (x_requires_grad) xd.requires_grad_(true);
    at::Tensor out;
    {
      RngFork fork(*holder);
      c10::AutoGradMode grad_on(true);
      out = holder->fn(xd);
    }
    if (out.requires_grad()) torch::autograd::backward({out}, {grads[0]});
    return {x_requires_grad ? xd.grad() : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor run_checkpointed(const UnitFn& fn, const at::Tensor& x, bool preserve_rng) {
  if (!c10::GradMode::is_enabled()) return fn(x);
  auto holder = c10::make_intrusive<UnitFnHolder>();
  holder->fn = fn;
  holder->preserve_rng = preserve_rng;
  // Without an input that requires grad autograd would not record this node at all, and the
  // unit's parameters would silently get no gradient (the classic re-entrant checkpoint pitfall).
  // (Custom functions take no undefined tensor inputs, so the anchor is always passed.)
  at::Tensor anchor = at::empty({0}, x.options().dtype(at::kFloat));
  if (!x.requires_grad()) anchor.requires_grad_(true);
  return CheckpointFunction::apply(x, anchor, holder);
}

}  // namespace wmtp
