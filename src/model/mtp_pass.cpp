// mtp_forward_backward / mtp_forward_loss: the sequential-unembedding and all-heads MTP steps.
#include "model/mtp_pass.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/labels.h"
#include "core/phase_timer.h"
#include "comm/device.h"
#include "model/mtp_loss.h"
#include "model/transformer.h"

namespace wmtp {

MtpPassOptions mtp_pass_options(const ModelConfig& cfg) {
  MtpPassOptions o;
  o.sequential_unembedding = cfg.sequential_unembedding;
  o.activation_checkpointing = cfg.activation_checkpointing;
  o.loss_chunk_size = cfg.loss_chunk_size;
  return o;
}

namespace {

void check_batch(const MtpModel& model, const MtpBatch& b, const at::Tensor* counts) {
  const int64_t K = model.n_future();
  if (!b.tokens.defined() || b.tokens.dim() != 2) throw_usage("MTP step: tokens must be [B, S]");
  if (!b.labels.defined() || b.labels.sizes() != b.tokens.sizes())
    throw_usage("MTP step: labels must match tokens ", b.tokens.sizes());
  if (b.weights.defined()) {
    const bool pos = b.weights.dim() == 2 && b.weights.sizes() == b.tokens.sizes();
    const bool head = b.weights.dim() == 3 && b.weights.size(0) == b.tokens.size(0) &&
                      b.weights.size(1) == b.tokens.size(1) && b.weights.size(2) == K;
    if (!pos && !head) throw_usage("MTP step: weights must be [B, S] or [B, S, ", K, "], got ", b.weights.sizes());
  }
  if (counts && (counts->dim() != 1 || counts->numel() != K))
    throw_usage("MTP step: ", counts->sizes(), " head normalizing counts for ", K, " heads");
}

// scale_k = 1 / (count_k * n_contributing) or 0 for a head without tokens: [K] double on `device`,
// computed there (the counts may be the device's own, e.g. rho1's selected tokens), unread.
at::Tensor head_scales(const at::Tensor& counts, c10::Device device) {
  const at::Tensor c = counts.to(device, at::kDouble);
  const at::Tensor has = c.gt(0);
  const at::Tensor n = has.sum().to(at::kDouble);
  return at::where(has, at::reciprocal(c * n), at::zeros({}, c.options()));
}

at::Tensor detached_like(const at::Tensor& t) {
  at::Tensor d = t.detach();
  if (t.requires_grad()) d.requires_grad_(true);
  return d;
}

at::Tensor grad_or_zeros(const at::Tensor& d, const at::Tensor& like) {
  return d.grad().defined() ? d.grad() : at::zeros_like(like);
}

// Moves a low-precision .grad into an fp32 sum, so a shared weight's gradient built from many
// partial products is rounded once rather than summed in bf16.
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

MtpPassResult init_result(int64_t K) {
  MtpPassResult r;
  r.weighted_sum.assign(K, 0.0);
  r.unweighted_sum.assign(K, 0.0);
  r.count.assign(K, 0);
  return r;
}

// The pass's figures, [2K + 1] double on the device (weighted sums, unweighted sums, the loss):
// left there (opt.read_sums false) or read to the host at once, the one host sync of a micro-batch,
// after its whole backward is queued.
MtpPassResult finish_result(MtpPassResult r, const at::Tensor& figures, const MtpPassOptions& opt) {
  r.figures = figures;
  if (!opt.read_sums) return r;
  const at::Tensor host = read_to_host(opt.phases, figures).contiguous();
  const double* h = host.data_ptr<double>();
  const size_t K = r.count.size();
  for (size_t k = 0; k < K; ++k) r.weighted_sum[k] = h[k], r.unweighted_sum[k] = h[K + k];
  r.loss = h[2 * K];
  return r;
}

// Source positions that matter: up to the last position with a valid label (right padding; causal
// attention, so later positions change nothing before them). At least 1, so every unit still runs.
// `labels` on the host.
int64_t source_length(const at::Tensor& labels) {
  at::Tensor valid = labels.ne(kIgnoreIndex).any(0).nonzero();
  return valid.numel() == 0 ? 1 : std::max<int64_t>(1, valid.max().item<int64_t>());
}

// Head k's rows: the source positions whose target is valid, flattened (b * S_src + t) into the
// trunk output, with their targets and weights. Prompt and padding positions are left out. Picked
// on the host (`labels_host`) and sent to the device without waiting, so no step of the forward
// waits for the GPU to drain.
struct HeadRows {
  at::Tensor index, targets, weights;  // [N] on the device; weights undefined when the batch has none
  int64_t n = 0;
};

HeadRows head_rows(const MtpBatch& b, const at::Tensor& labels_host, int64_t k, int64_t K, int64_t S_src) {
  HeadRows r;
  const int64_t L = std::min(labels_host.size(1) - k, S_src);
  if (L <= 0) return r;
  at::Tensor lab = labels_host.narrow(1, k, L);                                  // targets of sources 0 .. L-1
  at::Tensor flat = lab.ne(kIgnoreIndex).reshape({-1}).nonzero().reshape({-1});  // into [B * L]
  r.n = flat.numel();
  if (r.n == 0) return r;
  const c10::Device device = b.labels.device();
  r.index = to_device(at::div(flat, L, "floor") * S_src + at::remainder(flat, L), device);
  r.targets = to_device(lab.reshape({-1}).index_select(0, flat), device);
  at::Tensor w = head_weights(b.weights, k, 0, L, K);
  if (w.defined()) r.weights = w.reshape({-1}).index_select(0, to_device(flat, device)).to(at::kFloat);
  return r;
}

// The shared norm + output and the CE of one chunk of rows, forward and (with `backward`) backward:
// the logits' gradient w * scale * (softmax - onehot) is formed in place of the fp32 logits, the
// output weight's gradient accumulated into `out_acc` (fp32) and the rows' gradient sent back through
// the norm. `sums` [2] (double) gets sum(ce * w) and sum(ce).
struct OutputChunk {
  const at::Tensor& norm_w;  // detached copies of the output unit's tensors
  const at::Tensor& out_w;
  double eps;
};

// The [rows, V] buffers every chunk of every head reuses: the logits in the compute dtype and, when
// that is not fp32, their fp32 copy (the softmax and its gradient). A fresh tensor of this size per
// chunk is fresh pages on a CPU (tens of MB, faulted in and zeroed each time); reused, the loss
// phase holds the memory of one chunk, as before, and frees it before each head's backward.
struct LossBuffers {
  at::Tensor logits, fp32;
  static at::Tensor rows(at::Tensor& buf, int64_t n, int64_t V, const at::TensorOptions& options) {
    if (!buf.defined() || buf.size(0) < n) buf = at::empty({n, V}, options);
    return buf.narrow(0, 0, n);  // leading rows of a contiguous buffer: contiguous
  }
};

void output_chunk(const OutputChunk& o, const at::Tensor& rows, const at::Tensor& targets, const at::Tensor& weights,
                  const at::Tensor& scale, bool backward, at::Tensor& out_acc, at::Tensor& sums, LossBuffers& buf) {
  at::Tensor xs = rms_norm(rows, o.norm_w, o.eps);
  const bool need_dx = backward && xs.requires_grad(), need_dw = backward && o.out_w.requires_grad();
  at::Tensor grad_xs;
  {
    c10::NoGradGuard no_grad;
    at::Tensor xd = xs.detach();
    const at::Tensor w = o.out_w.detach();
    const int64_t n = xd.size(0), V = w.size(0);
    at::Tensor logits = LossBuffers::rows(buf.logits, n, V, xd.options());  // compute dtype
    at::mm_out(logits, xd, w.t());
    at::Tensor lf = logits;
    if (logits.scalar_type() != at::kFloat) {
      lf = LossBuffers::rows(buf.fp32, n, V, xd.options().dtype(at::kFloat));
      lf.copy_(logits);
    }
    // Softmax and CE in place, in fp32: lf - max, exp, row sums; ce = log(sum) - (l_t - max), the
    // same as logsumexp(l) - l_t without logsumexp's [rows, V] temporary.
    lf.sub_(std::get<0>(lf.max(1, /*keepdim=*/true)));
    at::Tensor shifted_target = lf.gather(1, targets.unsqueeze(1)).squeeze(1);
    at::Tensor row_sum = lf.exp_().sum(1);
    at::Tensor ce = row_sum.log() - shifted_target;
    sums[1].add_(ce.sum().to(at::kDouble));
    sums[0].add_(weights.defined() ? (ce * weights).sum().to(at::kDouble) : ce.sum().to(at::kDouble));
    if (need_dx || need_dw) {
      // scale: a 0-d double on the device, rounded to fp32 as a double scalar would be
      const at::Tensor scale_f = scale.to(at::kFloat);
      at::Tensor coef = weights.defined() ? weights * scale_f : scale_f.expand({n}).contiguous();
      at::Tensor g = lf;  // exp(l - max): one multiply makes it coef * softmax, the gradient in place
      g.mul_((coef / row_sum).unsqueeze(1));
      g.scatter_add_(1, targets.unsqueeze(1), coef.neg().unsqueeze(1));
      // in the compute dtype, over the logits it replaces
      at::Tensor gc = g.scalar_type() == logits.scalar_type() ? g : logits.copy_(g);
      if (need_dw) {
        if (gc.scalar_type() == at::kFloat)
          out_acc = out_acc.defined() ? out_acc.addmm_(gc.t(), xd) : at::mm(gc.t(), xd);
        else {
          at::Tensor part = at::mm(gc.t(), xd).to(at::kFloat);
          out_acc = out_acc.defined() ? out_acc.add_(part) : part;
        }
      }
      if (need_dx) grad_xs = at::mm(gc, w);
    }
  }
  if (grad_xs.defined()) xs.backward(grad_xs);
}

// The trunk's output (and a detached copy the heads start from), and the shared norm and output
// units, fetched once for every head; heads use detached copies of their tensors so their gradients
// are accumulated locally and flow back through the source's tensors only once. The norm is a
// D-vector: it is copied and its unit released at once, so the loss phase holds one gathered unit
// (output) beside the head block.
struct TrunkOutput {
  at::Tensor z, zd, norm_w, norm_wd, out_w, out_wd;
};

TrunkOutput forward_trunk_and_unembedding(const MtpModel& model, ParamSource& src, const at::Tensor& tokens,
                                          const ForwardOptions& fo) {
  TrunkOutput t;
  t.z = model.forward_trunk(src, tokens, fo);
  t.zd = detached_like(t.z);
  t.norm_w = src.begin_unit("norm").at("norm.weight");
  t.norm_wd = t.norm_w.detach().clone();
  if (t.norm_w.requires_grad()) t.norm_wd.requires_grad_(true);
  src.end_unit("norm", at::empty({0}, t.norm_w.options()));
  t.out_w = src.begin_unit("output").at("output.weight");
  t.out_wd = detached_like(t.out_w);
  return t;
}

// Sequential unembedding. With `backward` false (under no-grad) it only accumulates the sums.
MtpPassResult run_sequential(const MtpModel& model, ParamSource& src, const MtpBatch& b, const at::Tensor& scales,
                             const MtpPassOptions& opt, bool backward) {
  const int64_t K = model.n_future(), S = b.tokens.size(1), B = b.tokens.size(0), D = model.args().dim;
  ForwardOptions fo{opt.training, opt.activation_checkpointing && backward};
  MtpPassResult r = init_result(K);

  // One read-back of the labels at most (none when the caller kept the host copy).
  const at::Tensor labels_host = b.labels_host.defined() ? b.labels_host : read_to_host(opt.phases, b.labels);
  // Trailing padding is cut before the trunk — unless dropout is on: its masks are drawn over the
  // whole [B, S] and must stay those of the untrimmed batch (the all-heads path's, the peer's).
  const bool dropout = opt.training && model.lora().enabled && model.lora().dropout > 0.0;
  const int64_t S_src = dropout ? S : std::min(S, source_length(labels_host));
  TrunkOutput t;
  {
    PhaseScope phase(opt.phases, Phase::TrunkForward);
    t = forward_trunk_and_unembedding(model, src, S_src < S ? b.tokens.narrow(1, 0, S_src) : b.tokens, fo);
  }
  const at::Tensor &z = t.z, &zd = t.zd, &norm_w = t.norm_w, &out_w = t.out_w;
  at::Tensor& norm_wd = t.norm_wd;  // its grad is drained chunk by chunk
  at::Tensor norm_acc, out_acc;     // fp32 sums of the copies' grads
  at::Tensor sums = at::zeros({K, 2}, z.options().dtype(at::kDouble));
  const OutputChunk unembed{norm_wd, t.out_wd, model.args().norm_eps};

  for (int64_t k = 1; k <= K; ++k) {
    PhaseScope head_phase(opt.phases, Phase::Head, k - 1);
    at::Tensor h = model.forward_head_block(src, k - 1, zd, fo);
    at::Tensor hd = detached_like(h);
    const HeadRows rows = head_rows(b, labels_host, k, K, S_src);
    r.count[k - 1] = rows.n;
    const int64_t positions = opt.loss_chunk_size > 0 ? opt.loss_chunk_size : std::max<int64_t>(1, (S - k + 3) / 4);
    const int64_t chunk = std::max<int64_t>(1, positions * B);
    at::Tensor hflat = hd.reshape({-1, D});
    at::Tensor head_sums = sums[k - 1];
    {
      LossBuffers loss_buffers;  // this head's chunks share them; freed before the head's backward
      for (int64_t r0 = 0; r0 < rows.n; r0 += chunk) {
        const int64_t len = std::min(chunk, rows.n - r0);
        output_chunk(unembed, hflat.index_select(0, rows.index.narrow(0, r0, len)), rows.targets.narrow(0, r0, len),
                     rows.weights.defined() ? rows.weights.narrow(0, r0, len) : at::Tensor(), scales[k - 1], backward,
                     out_acc, head_sums, loss_buffers);
        drain_grad(norm_wd, norm_acc);
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
    PhaseScope phase(opt.phases, Phase::TrunkBackward);
    std::vector<at::Tensor> roots, grads;
    if (z.requires_grad()) roots.push_back(z), grads.push_back(grad_or_zeros(zd, z));
    if (norm_w.requires_grad()) roots.push_back(norm_w), grads.push_back(accumulated_grad(norm_wd, norm_acc, norm_w));
    if (out_w.requires_grad())
      roots.push_back(out_w),
          grads.push_back(out_acc.defined() ? out_acc.to(out_w.scalar_type()) : at::zeros_like(out_w));
    if (!roots.empty()) torch::autograd::backward(roots, grads);
  }
  // The loss in double, head by head in order (as a host sum of the read figures would be).
  at::Tensor loss = at::zeros({1}, sums.options());
  for (int64_t k = 0; k < K; ++k) loss = loss + sums[k][0] * scales[k];
  return finish_result(std::move(r), at::cat({sums.select(1, 0), sums.select(1, 1), loss}), opt);
}

MtpPassResult run_all_heads(const MtpModel& model, ParamSource& src, const MtpBatch& b, const at::Tensor& scales,
                            const MtpPassOptions& opt) {
  const int64_t K = model.n_future();
  ForwardOptions fo{opt.training, opt.activation_checkpointing};
  MtpPassResult r = init_result(K);
  MtpCeSums s = mtp_ce_sums(model.forward_logits(src, b.tokens, fo, /*all_heads=*/true), b.labels, b.weights);
  at::Tensor loss;
  for (int64_t k = 0; k < K; ++k) {
    r.count[k] = s.count[k];
    // Heads without tokens enter with scale 0 so the graph (and every unit's backward) is the same
    // on every rank whatever its counts.
    at::Tensor term = s.weighted[k] * scales[k].to(s.weighted[k].scalar_type());
    loss = loss.defined() ? loss + term : term;
  }
  if (loss.requires_grad()) loss.backward();
  // The sums and the loss (fp32 scalars, each widened to double as item() would).
  std::vector<at::Tensor> all = s.weighted;
  all.insert(all.end(), s.unweighted.begin(), s.unweighted.end());
  all.push_back(loss);
  return finish_result(std::move(r), at::stack(all).detach().to(at::kDouble), opt);
}

}  // namespace

MtpPassResult mtp_forward_backward(const MtpModel& model, ParamSource& src, const MtpBatch& batch,
                                   const std::vector<double>& head_norm_counts, const MtpPassOptions& opt) {
  return mtp_forward_backward(model, src, batch,
                              to_device(at::tensor(head_norm_counts, at::kDouble), batch.tokens.device()), opt);
}

MtpPassResult mtp_forward_backward(const MtpModel& model, ParamSource& src, const MtpBatch& batch,
                                   const at::Tensor& head_norm_counts, const MtpPassOptions& opt) {
  check_batch(model, batch, &head_norm_counts);
  const at::Tensor scales = head_scales(head_norm_counts, batch.tokens.device());
  c10::AutoGradMode grad_on(true);
  if (opt.sequential_unembedding) return run_sequential(model, src, batch, scales, opt, /*backward=*/true);
  return run_all_heads(model, src, batch, scales, opt);
}

MtpPassResult mtp_forward_loss(const MtpModel& model, ParamSource& src, const MtpBatch& batch,
                               const MtpPassOptions& opt) {
  check_batch(model, batch, nullptr);
  std::vector<int64_t> counts = count_valid_targets(batch.labels_host.defined() ? batch.labels_host : batch.labels,
                                                    model.n_future());
  const at::Tensor scales = head_scales(
      to_device(at::tensor(std::vector<double>(counts.begin(), counts.end()), at::kDouble), batch.tokens.device()),
      batch.tokens.device());
  c10::NoGradGuard no_grad;
  MtpPassOptions eval = opt;
  eval.training = false;
  eval.activation_checkpointing = false;
  eval.phases = nullptr;  // a step's phases, not validation's
  eval.read_sums = true;
  return run_sequential(model, src, batch, scales, eval, /*backward=*/false);
}

at::Tensor mtp_token_ce(const MtpModel& model, ParamSource& src, const MtpBatch& batch, const MtpPassOptions& opt) {
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
