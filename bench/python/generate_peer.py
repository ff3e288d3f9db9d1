#!/usr/bin/env python3
"""Plain-PyTorch peer of wmtp's head-0 greedy decoding with a KV cache, for bench-generate-throughput.

The model is mtp_peer.py's MTP LLaMA (same modules), loaded from a Meta-named safetensors export of a
wmtp checkpoint (`convert-checkpoint export --names meta --dtype fp32`: model*.safetensors +
params.json). Decoding is written the way a PyTorch user would write a KV-cache loop: eager, under
torch.inference_mode(), per block a preallocated [1, capacity, G, E] key/value buffer, one prefill
forward over the prompt (causal F.scaled_dot_product_attention), then one forward per new token (a
single query over every cached key: no mask), argmax of head 0's logits. Only the trunk and head 0
run: this is plain decoding, not speculative.

Input (--prompts): a JSON list of token-id lists. Every prompt gets exactly --max-new-tokens tokens
(no EOS), as the bench asks of wmtp, or with --eos-id stops after that token (counted, not returned, as
wmtp does). The first prompt is decoded once untimed (warm-up).

Prints one line `PEER {json}`: tokens_per_sec (new tokens over the timed decoding), seconds, tokens
(the generated ids per prompt, so the bench can check both sides decoded the same), config.
"""
import argparse
import glob
import json
import os
import sys
import time
import types

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mtp_peer import MtpTransformer, apply_rope, rope_tables  # noqa: E402  the same model code


def load_model(model_dir):
    p = json.load(open(os.path.join(model_dir, "params.json")))
    if p.get("ffn_dim_multiplier"):
        sys.exit("generate_peer.py: ffn_dim_multiplier is not supported by mtp_peer.py's FeedForward")
    a = types.SimpleNamespace(dim=p["dim"], n_layers=p["n_layers"], n_heads=p["n_heads"],
                              n_kv_heads=p.get("n_kv_heads") or p["n_heads"], vocab=p["vocab_size"],
                              multiple_of=p["multiple_of"], norm_eps=p["norm_eps"],
                              n_future=p.get("n_future_tokens", 1), rope_theta=p.get("rope_theta", 10000.0))
    model = MtpTransformer(a, fused=True)
    state = {}
    for f in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        state.update(load_file(f))
    state["unembed.norm.weight"] = state.pop("norm.weight")
    state["unembed.output.weight"] = state.pop("output.weight")
    model.load_state_dict(state, strict=False)  # extra_heads beyond head 0 are loaded too; unused here
    missing = set(dict(model.named_parameters())) - set(state)
    if missing:
        sys.exit("generate_peer.py: tensors missing from the export: %s" % sorted(missing))
    return model.eval(), a


def block_step(block, x, cos, sin, cache, offset):
    """One block at positions [offset, offset + S) over its KV cache (k, v buffers [1, cap, G, E])."""
    att = block.attention
    B, S, _ = x.shape
    xn = block.attention_norm(x)
    q = apply_rope(att.wq(xn).view(B, S, att.h, att.e), cos, sin)
    k = apply_rope(att.wk(xn).view(B, S, att.g, att.e), cos, sin)
    v = att.wv(xn).view(B, S, att.g, att.e)
    ck, cv = cache
    ck[:, offset:offset + S] = k
    cv[:, offset:offset + S] = v
    k, v = ck[:, :offset + S], cv[:, :offset + S]
    if att.g != att.h:
        k = k.repeat_interleave(att.h // att.g, dim=2)
        v = v.repeat_interleave(att.h // att.g, dim=2)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                       is_causal=S > 1)  # prefill starts at offset 0
    h = x + att.wo(o.transpose(1, 2).reshape(B, S, att.h * att.e))
    return h + block.feed_forward(block.ffn_norm(h))


def greedy(model, a, prompt, n_new, cos_all, sin_all, eos_id=-1):
    blocks = list(model.layers)  # the trunk, then head 0's block
    cap = len(prompt) + n_new
    E = a.dim // a.n_heads
    caches = [(torch.zeros(1, cap, a.n_kv_heads, E), torch.zeros(1, cap, a.n_kv_heads, E)) for _ in blocks]
    ids = torch.tensor([prompt], dtype=torch.long)
    offset, out = 0, []
    for _ in range(n_new):
        S = ids.size(1)
        cos, sin = cos_all[offset:offset + S], sin_all[offset:offset + S]
        h = model.tok_embeddings(ids)
        for blk, cache in zip(blocks, caches):
            h = block_step(blk, h, cos, sin, cache, offset)
        offset += S
        nxt = int(model.unembed(h[:, -1:]).argmax(-1))
        out.append(nxt)
        if nxt == eos_id:
            break
        ids = torch.tensor([[nxt]], dtype=torch.long)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="directory of the Meta-named safetensors export")
    ap.add_argument("--prompts", required=True, help="JSON list of token-id lists")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eos-id", type=int, default=-1, help="stop after this token (-1: never)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, a = load_model(args.model)
    prompts = json.load(open(args.prompts))
    cap = max(len(p) for p in prompts) + args.max_new_tokens
    cos, sin = rope_tables(a.dim // a.n_heads, cap, a.rope_theta, torch.device("cpu"))
    with torch.inference_mode():
        greedy(model, a, prompts[0], args.max_new_tokens, cos, sin, args.eos_id)  # warm-up
        t0 = time.perf_counter()
        tokens = [greedy(model, a, p, args.max_new_tokens, cos, sin, args.eos_id) for p in prompts]
        seconds = time.perf_counter() - t0
    n = sum(len(t) for t in tokens)  # EOS counted, as wmtp counts it
    tokens = [t[:-1] if t and t[-1] == args.eos_id else t for t in tokens]  # ids without EOS, as wmtp's
    config = ("torch %s eager, inference_mode, fp32, SDPA attention, preallocated KV cache, batch 1, %d thread(s)"
              % (torch.__version__, args.threads))
    print("PEER " + json.dumps({"tokens_per_sec": n / seconds, "seconds": seconds, "tokens": tokens,
                                "config": config}))


if __name__ == "__main__":
    main()
