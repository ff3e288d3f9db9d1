// mtp_forward_backward / mtp_forward_loss: the sequential-unembedding and all-heads MTP steps.
#include "model/mtp_step.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>

#include "core/error.h"
#include "model/mtp_loss.h"
#include "model/transformer.h"

namespace wmtp {

MtpStepOptions mtp_step_options(const ModelConfig& cfg) {
  MtpStepOptions o;
  o.sequential_unembedding = cfg.sequential_unembedding;
  o.activation_checkpointing = cfg.activation_checkpointing;
  o.loss_chunk_size = cfg.loss_chunk_size;
  return o;
}

namespace {

void check_batch(const MtpModel& model, const MtpBatch& b, const std::vector<double>* counts) {
  const int64_t K = model.n_future();
  if (!b.tokens.defined() || b.tokens.dim() != 2) throw_usage("MTP step: tokens must be [B, S]");
  if (!b.labels.defined() || b.labels.sizes() != b.tokens.sizes())
    throw_usage("MTP step: labels must match tokens ", b.tokens.sizes());
  if (b.weights.defined()) {
    const bool pos = b.weights.dim() == 2 && b.weights.sizes() == b.tokens.sizes();
    const bool head = b.weights.dim() == 3 && b.weights.size(0) == b.tokens.size(0) &&
                      b.weights.size(1) == b.tokens.size(1) && b.weights.size(2) == K;
    if (!pos && !head)
      throw_usage("MTP step: weights must be [B, S] or [B, S, ", K, "], got ", b.weights.sizes());
  }
  if (counts && static_cast<int64_t>(counts->size()) != K)
    throw_usage("MTP step: ", counts->size(), " head normalising counts for ", K, " heads");
}

// scale_k = 1 / (count_k * n_contributing) or 0 for a head without tokens.
std::vector<double> head_scales(const std::vector<double>& counts) {
  const int64_t n = count_contributing_heads(counts);
  std::vector<double> s(counts.size(), 0.0);
  for (size_t k = 0; k < counts.size(); ++k)
    if (counts[k] > 0) s[k] = 1.0 / (counts[k] * static_cast<double>(n));
  return s;
}

at::Tensor detached_like(const at::Tensor& t) {
  at::Tensor d = t.detach();
  if (t.requires_grad()) d.requires_grad_(true);
  return d;
}

at::Tensor grad_or_zeros(const at::Tensor& d, const at::Tensor& like) {
  return d.grad().defined() ? d.grad() : at::zeros_like(like);
}

// Moves a low-precision .grad into an fp32 sum, so the output weights' gradient, which the
// sequential path builds from K x chunks partial products, is rounded once rather than summed in bf16.
void drain_grad(at::Tensor& d, at::Tensor& acc) {
  if (!d.grad().defined() || d.scalar_type() == at::kFloat) return;
  at::Tensor g = d.grad().to(at::kFloat);
  acc = acc.defined() ? acc.add_(g) : g;
  d.mutable_grad() = at::Tensor();
}

at::Tensor accumulated_grad(const at::Tensor& d, const at::Tensor& acc, const at::Tensor& like) {
  if (acc.defined()) return acc.to(like.scalar_type());
  return grad_or_zeros(d, like);
}

MtpStepResult init_result(int64_t K) {
  MtpStepResult r;
  r.weighted_sum.assign(K, 0.0);
  r.unweighted_sum.assign(K, 0.0);
  r.count.assign(K, 0);
  return r;
}

// Sequential unembedding. With `backward` false (under no-grad) it only accumulates the sums.
MtpStepResult run_sequential(const MtpModel& model, ParamSource& src, const MtpBatch& b,
                             const std::vector<double>& scales, const MtpStepOptions& opt, bool backward) {
  const int64_t K = model.n_future(), S = b.tokens.size(1);
  const double eps = model.args().norm_eps;
  ForwardOptions fo{opt.training, opt.activation_checkpointing && backward};
  MtpStepResult r = init_result(K);

  at::Tensor z = model.forward_trunk(src, b.tokens, fo);
  at::Tensor zd = detached_like(z);
  // The shared norm and output units are fetched once; heads use detached copies of their tensors
  // so their gradients are accumulated locally and flow back through the source's tensors only once.
  // The norm is a D-vector: it is copied and its unit released at once, so the loss phase holds one
  // gathered unit (output) beside the head block.
  const at::Tensor norm_w = src.begin_unit("norm").at("norm.weight");
  at::Tensor norm_wd = norm_w.detach().clone();
  if (norm_w.requires_grad()) norm_wd.requires_grad_(true);
  src.end_unit("norm", at::empty({0}, norm_w.options()));
  const at::Tensor out_w = src.begin_unit("output").at("output.weight");
  at::Tensor out_wd = detached_like(out_w);
  at::Tensor norm_acc, out_acc;  // fp32 sums of the copies' grads (only for bf16/fp16 weights)

  for (int64_t k = 1; k <= K; ++k) {
    at::Tensor h = model.forward_head_block(src, k - 1, zd, fo);
    at::Tensor hd = detached_like(h);
    const int64_t L = S - k;
    const int64_t chunk = opt.loss_chunk_size > 0 ? opt.loss_chunk_size : std::max<int64_t>(1, (L + 3) / 4);
    for (int64_t c0 = 0; c0 < L; c0 += chunk) {
      const int64_t len = std::min(chunk, L - c0);
      // The logits die with this statement: only log-softmax's output stays saved for backward.
      HeadCeSums s = head_ce_sums(at::linear(rms_norm(hd.narrow(1, c0, len), norm_wd, eps), out_wd),
                                  b.labels.narrow(1, k + c0, len), head_weights(b.weights, k, c0, len, K));
      r.weighted_sum[k - 1] += s.weighted.item<double>();
      r.unweighted_sum[k - 1] += s.unweighted.item<double>();
      r.count[k - 1] += s.count;
      if (backward && s.weighted.requires_grad()) {
        (s.weighted * scales[k - 1]).backward();
        drain_grad(norm_wd, norm_acc);
        drain_grad(out_wd, out_acc);
      }
    }
    if (backward && h.requires_grad()) h.backward(grad_or_zeros(hd, h));
  }
  // Nothing back-propagates through this unit's saved tensors any more (the heads' backward is
  // done), so its output is reported without grad: an engine frees the gather and adds no hook.
  // (The final backward below reaches norm_w / out_w through the source's gather, which needs the
  // incoming gradient, not the freed values.)
  src.end_unit("output", at::empty({0}, out_w.options()));

  if (backward) {
    std::vector<at::Tensor> roots, grads;
    if (z.requires_grad()) roots.push_back(z), grads.push_back(grad_or_zeros(zd, z));
    if (norm_w.requires_grad()) roots.push_back(norm_w), grads.push_back(accumulated_grad(norm_wd, norm_acc, norm_w));
    if (out_w.requires_grad()) roots.push_back(out_w), grads.push_back(accumulated_grad(out_wd, out_acc, out_w));
    if (!roots.empty()) torch::autograd::backward(roots, grads);
  }
  for (int64_t k = 0; k < K; ++k) r.loss += r.weighted_sum[k] * scales[k];
  return r;
}

MtpStepResult run_all_heads(const MtpModel& model, ParamSource& src, const MtpBatch& b,
                            const std::vector<double>& scales, const MtpStepOptions& opt) {
  const int64_t K = model.n_future();
  ForwardOptions fo{opt.training, opt.activation_checkpointing};
  MtpStepResult r = init_result(K);
  MtpCeSums s = mtp_ce_sums(model.forward_logits(src, b.tokens, fo, /*all_heads=*/true), b.labels, b.weights);
  at::Tensor loss;
  for (int64_t k = 0; k < K; ++k) {
    r.weighted_sum[k] = s.weighted[k].item<double>();
    r.unweighted_sum[k] = s.unweighted[k].item<double>();
    r.count[k] = s.count[k];
    // Heads without tokens enter with scale 0 so the graph (and every unit's backward) is the same
    // on every rank whatever its counts.
    at::Tensor term = s.weighted[k] * scales[k];
    loss = loss.defined() ? loss + term : term;
  }
  if (loss.requires_grad()) loss.backward();
  r.loss = loss.item<double>();
  return r;
}

}  // namespace

MtpStepResult mtp_forward_backward(const MtpModel& model, ParamSource& src, const MtpBatch& batch,
                                   const std::vector<double>& head_norm_counts, const MtpStepOptions& opt) {
  check_batch(model, batch, &head_norm_counts);
  const std::vector<double> scales = head_scales(head_norm_counts);
  c10::AutoGradMode grad_on(true);
  if (opt.sequential_unembedding) return run_sequential(model, src, batch, scales, opt, /*backward=*/true);
  return run_all_heads(model, src, batch, scales, opt);
}

MtpStepResult mtp_forward_loss(const MtpModel& model, ParamSource& src, const MtpBatch& batch,
                               const MtpStepOptions& opt) {
  check_batch(model, batch, nullptr);
  std::vector<int64_t> counts = count_valid_targets(batch.labels, model.n_future());
  const std::vector<double> scales = head_scales(std::vector<double>(counts.begin(), counts.end()));
  c10::NoGradGuard no_grad;
  MtpStepOptions eval = opt;
  eval.training = false;
  eval.activation_checkpointing = false;
  return run_sequential(model, src, batch, scales, eval, /*backward=*/false);
}

at::Tensor mtp_token_ce(const MtpModel& model, ParamSource& src, const MtpBatch& batch, const MtpStepOptions& opt) {
  check_batch(model, MtpBatch{batch.tokens, batch.labels, {}}, nullptr);
  c10::NoGradGuard no_grad;
  const int64_t K = model.n_future(), B = batch.tokens.size(0), S = batch.tokens.size(1);
  const double eps = model.args().norm_eps;
  ForwardOptions fo{opt.training, false};
  at::Tensor out = at::zeros({B, S, K}, batch.tokens.options().dtype(at::kFloat));
  at::Tensor z = model.forward_trunk(src, batch.tokens, fo);
  // The norm (a D-vector) is copied and its unit released at once, as in run_sequential.
  const at::Tensor norm_w = src.begin_unit("norm").at("norm.weight").clone();
  src.end_unit("norm", at::empty({0}, norm_w.options()));
  const at::Tensor out_w = src.begin_unit("output").at("output.weight");
  for (int64_t k = 1; k <= K; ++k) {
    at::Tensor h = model.forward_head_block(src, k - 1, z, fo);
    const int64_t L = S - k;
    const int64_t chunk = opt.loss_chunk_size > 0 ? opt.loss_chunk_size : std::max<int64_t>(1, (L + 3) / 4);
    for (int64_t c0 = 0; c0 < L; c0 += chunk) {
      const int64_t len = std::min(chunk, L - c0);
      at::Tensor logits = at::linear(rms_norm(h.narrow(1, c0, len), norm_w, eps), out_w);
      out.narrow(1, c0, len).select(2, k - 1).copy_(head_token_ce(logits, batch.labels.narrow(1, k + c0, len)));
    }
  }
  src.end_unit("output", at::empty({0}, out_w.options()));
  return out;
}

}  // namespace wmtp
