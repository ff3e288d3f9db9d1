"""The HF side of test_hf_roundtrip.sh: transformers and peft, offline, on wmtp's exports.

  peers HF_DIR PEFT_DIR OUT_DIR SEED   in OUT_DIR: tokens.safetensors ("tokens", int64 [2, 24],
        seeded, below config.json's vocab_size) and the head-0 logits ("logits", fp32 [B, S, V]) of
        LlamaForCausalLM.from_pretrained(HF_DIR): hf_base; with PeftModel.from_pretrained(PEFT_DIR)
        (unmerged): peft_lora; then the adapter as trained on the Python side — every lora_A /
        lora_B moved by seeded noise of its own scale — saved with save_pretrained to OUT_DIR/edited
        (wmtp's MTP-head adapters, which PEFT does not know, copied beside unchanged), and its
        logits unmerged (peft_edited) and after merge_and_unload (peft_merged)
  compare OURS:PEERS[:WITHOUT]=WHAT ...  OURS' logits equal PEERS' within fp32 tolerance (max |diff|
        <= 1e-5 max |PEERS|); with WITHOUT, PEERS is also far from WITHOUT's (the adapter moves the
        logits: the match is not vacuous). Every check is printed; exit 1 if one fails.
"""
import json
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TOLERANCE = 1e-5  # fp32: both sides sum the same products in other orders
MTP_SIDECAR = "adapter_mtp_heads.safetensors"  # wmtp's adapters of the extra heads (docs/checkpoint-format.md)


def peers(hf_dir, peft_dir, out, seed):
    import torch
    from peft import PeftModel
    from safetensors.torch import save_file
    from transformers import LlamaForCausalLM

    def base():
        return LlamaForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager").eval()

    def logits(model, name):
        with torch.no_grad():
            save_file({"logits": model(input_ids=tokens).logits.float().contiguous()}, os.path.join(out, name))

    vocab = json.load(open(os.path.join(hf_dir, "config.json")))["vocab_size"]
    tokens = torch.randint(0, vocab, (2, 24), generator=torch.Generator().manual_seed(1), dtype=torch.int64)
    save_file({"tokens": tokens}, os.path.join(out, "tokens.safetensors"))
    logits(base(), "hf_base.safetensors")
    logits(PeftModel.from_pretrained(base(), peft_dir).eval(), "peft_lora.safetensors")

    model = PeftModel.from_pretrained(base(), peft_dir, is_trainable=True)
    g = torch.Generator().manual_seed(seed)
    moved = 0
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if ".lora_A." in name or ".lora_B." in name:
                p.add_(torch.randn(p.shape, generator=g) * (p.abs().mean().item() or 1e-2))
                moved += 1
    assert moved, "no LoRA parameter in the adapter"
    edited = os.path.join(out, "edited")
    model.save_pretrained(edited)
    if os.path.exists(os.path.join(peft_dir, MTP_SIDECAR)):
        shutil.copy(os.path.join(peft_dir, MTP_SIDECAR), edited)
    print(f"  peft: {moved} LoRA tensors moved, saved to {edited}")
    logits(model.eval(), "peft_edited.safetensors")
    logits(model.merge_and_unload().eval(), "peft_merged.safetensors")


def compare(checks):
    from safetensors.numpy import load_file

    failed = 0
    for check in checks:
        files, what = check.split("=", 1)
        ours, ref, *without = [load_file(f)["logits"] for f in files.split(":")]
        try:
            assert ours.shape == ref.shape, f"shapes {ours.shape} vs {ref.shape}"
            scale, err = float(abs(ref).max()), float(abs(ours - ref).max())
            line = f"max |diff| {err:.3g} of max |logit| {scale:.3g} (tolerance {TOLERANCE:g} relative)"
            if without:
                change = float(abs(ref - without[0]).max())
                line += f"; the adapter moves them by {change:.3g}"
                assert change > 1e3 * TOLERANCE * scale, f"{line}: the adapter changes nothing measurable"
            assert scale > 0 and err <= TOLERANCE * scale, f"{line}: logits differ"
            print(f"ok   {what}: {line}")
        except AssertionError as e:
            print(f"FAIL {what}: {e}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "peers":
        peers(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif len(sys.argv) > 2 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2:]))
    else:
        sys.exit(__doc__)
