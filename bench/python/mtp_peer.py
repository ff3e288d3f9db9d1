#!/usr/bin/env python3
"""Plain-PyTorch peer of wmtp's train-baseline step, for side-by-side benchmarks (bench/README.md).

The same multi-token-prediction LLaMA (Meta's layout: trunk blocks, head blocks that all read the
trunk output, one shared norm + output), written the way a PyTorch user would: nn.Modules, eager,
per-head sequential backward (trunk output detached, each head's loss backward in turn, then one
trunk backward), loss normalized per head by its valid-target count and averaged over heads,
clip_grad_norm_(1.0), AdamW (--lr, --weight-decay, betas (0.9, 0.95), eps 1e-8) at a constant learning
rate from the first step (the bench runs wmtp with the same settings). One optimizer step per
micro-batch (wmtp's bench runs accumulation 1).

Modes (--mode):
  eager    fused attention (F.scaled_dot_product_attention) where torch has it (>= 2.0), else the
           explicit causal softmax; AdamW fused on CUDA (torch >= 2.0), foreach otherwise.
  compile  eager + torch.compile on each block (torch >= 2.0).
  fsdp2    eager wrapped in FSDP2 fully_shard per block and at the root, world size 1, bf16
           parameters / fp32 reduction (torch >= 2.4; CUDA + NCCL).
Precision (--dtype): fp32, or bf16 = autocast(bfloat16) over fp32 parameters (eager, compile); fsdp2
casts parameters to bf16 itself.

Data: --batch-file (raw little-endian int64 [N, 2, B, S]: tokens then labels per micro-batch, -100
labels ignored, written by bench-train-throughput) or synthetic (--synthetic: random tokens, a
prompt of --prompt positions with label -100). Tokens counted as wmtp counts them: non-padding
tokens, i.e. positions up to the last valid label of each row (synthetic: every position).

Prints one line `PEER {json}` with tokens/s, step time, peak memory and "config", a sentence stating
how this peer ran (mode, attention, optimizer implementation, precision, threads); MFU (6 * params *
tokens / peak) when --peak-tflops is given (the bench computes its own, by wmtp's one definition).
Run on CPU with PyTorch 2.15 (eager, compile) and Debian's torch 1.13 (eager), fp32; the 2.x-only paths are guarded.
"""
import argparse
import json
import math
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

TORCH_MAJOR = int(torch.__version__.split(".")[0])
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


# ---- model -------------------------------------------------------------------------------------

def ffn_hidden_dim(dim, multiple_of, ffn_dim_multiplier=None):
    hidden = int(2 * 4 * dim / 3)
    if ffn_dim_multiplier:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_tables(head_dim, seq_len, theta, device):
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device).float(), freqs)
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x, cos, sin):  # x [B, S, H, E], Meta's interleaved pairs, fp32 maths
    xf = x.float().reshape(*x.shape[:-1], -1, 2)
    re, im = xf[..., 0], xf[..., 1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((re * c - im * s, re * s + im * c), -1).flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, fused):
        super().__init__()
        self.h, self.g, self.e = n_heads, n_kv_heads, dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.e, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.e, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.e, bias=False)
        self.wo = nn.Linear(n_heads * self.e, dim, bias=False)
        self.fused = fused and HAS_SDPA

    def forward(self, x, cos, sin, mask):
        B, S, _ = x.shape
        q = apply_rope(self.wq(x).view(B, S, self.h, self.e), cos, sin)
        k = apply_rope(self.wk(x).view(B, S, self.g, self.e), cos, sin)
        v = self.wv(x).view(B, S, self.g, self.e)
        if self.g != self.h:
            k = k.repeat_interleave(self.h // self.g, dim=2)
            v = v.repeat_interleave(self.h // self.g, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.fused:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.e)
            o = torch.matmul(torch.softmax(scores.float() + mask, -1).type_as(q), v)
        return self.wo(o.transpose(1, 2).reshape(B, S, self.h * self.e))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, a, fused):
        super().__init__()
        self.attention_norm = RMSNorm(a.dim, a.norm_eps)
        self.attention = Attention(a.dim, a.n_heads, a.n_kv_heads, fused)
        self.ffn_norm = RMSNorm(a.dim, a.norm_eps)
        self.feed_forward = FeedForward(a.dim, ffn_hidden_dim(a.dim, a.multiple_of))

    def forward(self, x, cos, sin, mask):
        h = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Unembed(nn.Module):  # the shared norm + output (one FSDP unit, as wmtp's "output" unit)
    def __init__(self, a):
        super().__init__()
        self.norm = RMSNorm(a.dim, a.norm_eps)
        self.output = nn.Linear(a.dim, a.vocab, bias=False)

    def forward(self, h):
        return self.output(self.norm(h))


class MtpTransformer(nn.Module):
    def __init__(self, a, fused):
        super().__init__()
        self.a = a
        self.n_trunk = a.n_layers - a.n_future
        self.tok_embeddings = nn.Embedding(a.vocab, a.dim)
        self.layers = nn.ModuleList(Block(a, fused) for _ in range(self.n_trunk + 1))
        self.extra_heads = nn.ModuleList(Block(a, fused) for _ in range(a.n_future - 1))
        self.unembed = Unembed(a)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def blocks(self):
        return list(self.layers) + list(self.extra_heads)

    def head_block(self, k):
        return self.layers[self.n_trunk] if k == 0 else self.extra_heads[k - 1]


# ---- one training step ---------------------------------------------------------------------------

def train_step(model, opt, tokens, labels, tables, autocast_dtype, device):
    a = model.a
    cos, sin, mask = tables
    S = tokens.size(1)
    K = a.n_future
    counts = [int((labels[:, k + 1:] != -100).sum()) for k in range(K)]
    n_heads = sum(1 for c in counts if c > 0)
    ac = torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype is not None else _null()
    with ac:
        z = model.tok_embeddings(tokens)
        for layer in model.layers[: model.n_trunk]:
            z = layer(z, cos, sin, mask)
    zd = z.detach().requires_grad_()
    loss_total = 0.0
    for k in range(K):  # per-head backward: one head's logits alive at a time
        with ac:
            h = model.head_block(k)(zd, cos, sin, mask)
            logits = model.unembed(h)[:, : S - k - 1]
        ce = F.cross_entropy(logits.float().reshape(-1, a.vocab), labels[:, k + 1:].reshape(-1),
                             ignore_index=-100, reduction="sum")
        scale = 1.0 / (counts[k] * n_heads) if counts[k] > 0 else 0.0
        loss = ce * scale
        loss.backward()
        loss_total += float(loss.detach())
    z.backward(zd.grad)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss_total


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# ---- driver --------------------------------------------------------------------------------------

def load_batches(args, device):
    if args.batch_file:
        import numpy as np
        raw = np.fromfile(args.batch_file, dtype="<i8")
        per = 2 * args.batch * args.seq
        if raw.size == 0 or raw.size % per:
            sys.exit(f"{args.batch_file}: {raw.size} int64 values, not a multiple of 2 x {args.batch} x {args.seq}")
        data = torch.from_numpy(raw.reshape(-1, 2, args.batch, args.seq).copy())
        batches = [(d[0].to(device), d[1].to(device)) for d in data]
    else:
        g = torch.Generator().manual_seed(1)
        batches = []
        for _ in range(4):
            tokens = torch.randint(args.vocab, (args.batch, args.seq), generator=g)
            labels = tokens.clone()
            labels[:, : args.prompt] = -100
            batches.append((tokens.to(device), labels.to(device)))
    return batches


def real_tokens(labels):
    # right padding: a row's real tokens end at its last valid label
    valid = (labels != -100).to(torch.int64)
    S = labels.size(1)
    pos = torch.arange(1, S + 1, device=labels.device).expand_as(valid)
    return int((valid * pos).max(1).values.sum())


def peak_memory_gib(device):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def build(args, device):
    fused_attn = args.mode in ("eager", "compile", "fsdp2")
    model = MtpTransformer(args, fused_attn).to(device)
    autocast = torch.bfloat16 if args.dtype == "bf16" and args.mode != "fsdp2" else None
    if args.mode == "compile":
        if TORCH_MAJOR < 2:
            sys.exit("--mode compile needs torch >= 2.0")
        if hasattr(nn.Module, "compile"):  # torch >= 2.2: in place, names unchanged
            for b in model.blocks():
                b.compile()
        else:
            for blocks in (model.layers, model.extra_heads):
                for i in range(len(blocks)):
                    blocks[i] = torch.compile(blocks[i])
    if args.mode == "fsdp2":
        if device.type != "cuda":
            sys.exit("--mode fsdp2 needs CUDA")
        import torch.distributed as dist
        try:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        except ImportError:
            from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        dist.init_process_group("nccl", rank=0, world_size=1)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        # One FSDP unit per block, the embedding and the unembedding, as wmtp's units. The step calls
        # these modules directly (per-head backward), never the root's forward, so each is its own root.
        for m in model.blocks() + [model.tok_embeddings, model.unembed]:
            fully_shard(m, mp_policy=mp)
    opt_kwargs = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=args.weight_decay)
    if device.type == "cuda" and TORCH_MAJOR >= 2 and args.mode != "fsdp2":
        opt_kwargs["fused"] = True
    else:
        opt_kwargs["foreach"] = True
    opt = torch.optim.AdamW(model.parameters(), **opt_kwargs)
    return model, opt, autocast


def describe(args, opt, autocast):
    """One sentence: how this peer ran (printed by the bench beside its figures)."""
    attention = "scaled_dot_product_attention" if HAS_SDPA else "explicit causal softmax"
    adamw = "fused" if opt.defaults.get("fused") else "foreach"
    precision = {None: "fp32" if args.dtype == "fp32" else "bf16 parameters (FSDP2 mixed precision)",
                 torch.bfloat16: "bf16 autocast over fp32 parameters"}[autocast]
    compiled = "torch.compile on each block" if args.mode == "compile" else "eager"
    wrap = ", FSDP2 fully_shard per block at world size 1" if args.mode == "fsdp2" else ""
    return (f"torch {torch.__version__}, {compiled}{wrap}, {attention}, {precision}, "
            f"AdamW {adamw} (lr {args.lr:g} constant, betas (0.9, 0.95), eps 1e-8, weight decay "
            f"{args.weight_decay:g}), clip_grad_norm_ 1.0, per-head sequential backward, "
            f"{torch.get_num_threads()} threads")


def profile_one_step(args, model, opt, batch, tables, autocast, device):
    """One untimed step under torch.profiler: where the peer's step goes, by operator (self time)."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        train_step(model, opt, batch[0], batch[1], tables, autocast, device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"peer {args.mode}: one step by operator ({key}):", file=sys.stderr)
    print(prof.key_averages().table(sort_by=key, row_limit=args.profile_table), file=sys.stderr, flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["eager", "compile", "fsdp2"], default="eager")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--n-layers", dest="n_layers", type=int, default=8)
    p.add_argument("--n-heads", dest="n_heads", type=int, default=8)
    p.add_argument("--n-kv-heads", dest="n_kv_heads", type=int, default=0)
    p.add_argument("--n-future", dest="n_future", type=int, default=4)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--multiple-of", dest="multiple_of", type=int, default=256)
    p.add_argument("--norm-eps", dest="norm_eps", type=float, default=1e-5)
    p.add_argument("--rope-theta", dest="rope_theta", type=float, default=10000.0)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch-file", dest="batch_file", default="")
    p.add_argument("--prompt", type=int, default=0, help="synthetic data: ignored leading positions")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--weight-decay", dest="weight_decay", type=float, default=0.01)
    p.add_argument("--profile-table", dest="profile_table", type=int, default=0,
                   help="after the timed steps, one more step under torch.profiler; print its N costliest ops "
                        "(self time) to stderr, the table to set beside wmtp's perf/phase_* (0 = none)")
    p.add_argument("--peak-tflops", dest="peak_tflops", type=float, default=0.0,
                   help="MFU denominator (989 for H100/H200 bf16 dense); 0 = no MFU")
    args = p.parse_args()
    if args.n_kv_heads == 0:
        args.n_kv_heads = args.n_heads
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)

    model, opt, autocast = build(args, device)
    batches = load_batches(args, device)
    n_params = sum(p.numel() for p in model.parameters())
    E = args.dim // args.n_heads
    cos, sin = rope_tables(E, args.seq, args.rope_theta, device)
    mask = torch.full((args.seq, args.seq), float("-inf"), device=device).triu(1)
    tables = (cos, sin, mask)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    losses, times, tokens = [], [], 0
    for i in range(args.warmup + args.steps):
        tok, lab = batches[i % len(batches)]
        if i == args.warmup and device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        sync()
        t0 = time.perf_counter()
        losses.append(train_step(model, opt, tok, lab, tables, autocast, device))
        sync()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
            tokens += real_tokens(lab)
        print(f"peer step {i + 1}/{args.warmup + args.steps}: loss {losses[-1]:.4f}, {time.perf_counter() - t0:.2f} s",
              file=sys.stderr, flush=True)
    if args.profile_table > 0:
        profile_one_step(args, model, opt, batches[0], tables, autocast, device)
    total = sum(times)
    tps = tokens / total
    out = {
        "mode": args.mode, "device": str(device), "dtype": args.dtype, "torch": torch.__version__,
        "threads": torch.get_num_threads(), "params": n_params, "steps": args.steps,
        "tokens_per_sec": tps, "step_time_sec": total / len(times),
        "peak_memory_gib": peak_memory_gib(device), "losses": losses,
        "fused_attention": HAS_SDPA, "config": describe(args, opt, autocast),
    }
    if args.peak_tflops > 0:
        out["mfu_pct"] = 100.0 * 6.0 * n_params * tps / (args.peak_tflops * 1e12)
    print("PEER " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
