# A random tiny MTP model as Meta-named safetensors + params.json (for `convert-checkpoint import
# --from meta`): the generate/evaluate script tests decode with it. Usage: make_tiny_model.py DIR VOCAB SEED [PAD]
# PAD > 0: the model vocabulary is padded to VOCAB + PAD ids: the first VOCAB rows of the embedding
# and output are those of the unpadded model of that SEED (every other tensor too); the output rows
# past them are 4x rows 0..PAD-1, large enough that a decoder looking at them would emit them.
import json, os, sys

import torch
from safetensors.torch import save_file

out, vocab, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pad = int(sys.argv[4]) if len(sys.argv) > 4 else 0
dim, n_heads, n_kv, n_future, trunk, mult = 32, 4, 2, 3, 2, 16
args = {"dim": dim, "n_layers": trunk + n_future, "n_heads": n_heads, "n_kv_heads": n_kv, "vocab_size": vocab,
        "multiple_of": mult, "norm_eps": 1e-5, "rope_theta": 10000.0, "n_future_tokens": n_future, "max_seq_len": 256}
hidden = int(2 * 4 * dim / 3)
hidden = mult * ((hidden + mult - 1) // mult)
g = torch.Generator().manual_seed(seed)
w = lambda *s: torch.randn(*s, generator=g) * 0.02
hd = dim // n_heads
t = {"tok_embeddings.weight": w(vocab, dim), "norm.weight": torch.ones(dim),
     "output.weight": w(vocab, dim) * 50}  # decisive logits: greedy has no near-ties
blocks = [f"layers.{i}" for i in range(trunk + 1)] + [f"extra_heads.{j}" for j in range(n_future - 1)]
for b in blocks:
    t[f"{b}.attention.wq.weight"] = w(n_heads * hd, dim)
    t[f"{b}.attention.wk.weight"] = w(n_kv * hd, dim)
    t[f"{b}.attention.wv.weight"] = w(n_kv * hd, dim)
    t[f"{b}.attention.wo.weight"] = w(dim, n_heads * hd)
    t[f"{b}.feed_forward.w1.weight"] = w(hidden, dim)
    t[f"{b}.feed_forward.w2.weight"] = w(dim, hidden)
    t[f"{b}.feed_forward.w3.weight"] = w(hidden, dim)
    t[f"{b}.attention_norm.weight"] = torch.ones(dim)
    t[f"{b}.ffn_norm.weight"] = torch.ones(dim)
if pad > 0:  # drawn after every other tensor: the unpadded model's tensors are unchanged
    assert pad <= vocab, "PAD rows copy output rows 0..PAD-1"
    t["tok_embeddings.weight"] = torch.cat([t["tok_embeddings.weight"], w(pad, dim)])
    t["output.weight"] = torch.cat([t["output.weight"], 4 * t["output.weight"][:pad]])
    args["vocab_size"] = vocab + pad
os.makedirs(out, exist_ok=True)
save_file({k: v.contiguous() for k, v in t.items()}, os.path.join(out, "model.safetensors"))
json.dump(args, open(os.path.join(out, "params.json"), "w"))
