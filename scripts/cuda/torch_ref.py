#!/usr/bin/env python3
"""PyTorch/transformers side of scripts/cuda/gpu-check.sh (runs on the GPU machine).

  torch_ref.py make-model DIR          save a small random Qwen2 (float32) to DIR
  torch_ref.py logits DIR IDS OUT [--bf16]
                                       write transformers' logits for IDS (comma list) to OUT (JSON);
                                       --bf16: under torch.autocast(bfloat16), float32 weights
  torch_ref.py compare A.json B.json   compare two logits files; exit 1 past the tolerance
  torch_ref.py bench --batch B --seq T [--peak-tflops P] [--bf16]
                                       fwd+bwd tokens/s of Qwen2.5-0.5B dimensions, float32 (or
                                       --bf16: autocast bfloat16 with float32 master weights, as
                                       cuda-bench -precision bf16), PyTorch eager, same loss as
                                       cuda-bench -mode train
"""
import argparse
import json
import sys
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

# Qwen2.5-0.5B-Instruct's shape (hfconfig.Preset("qwen2.5-0.5b")).
QWEN05 = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
              num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6,
              rms_norm_eps=1e-6, tie_word_embeddings=True)
# A small random model for the logits comparison: GQA, biases, untied head.
SMALL = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256, rope_theta=10000.0,
             rms_norm_eps=1e-6, tie_word_embeddings=False)


def config(shape):
    """A Qwen2Config of shape, with the RoPE base set for transformers 4 and 5."""
    kw = dict(shape)
    theta = kw.pop("rope_theta")
    cfg = Qwen2Config(**kw)
    cfg.rope_theta = theta
    if getattr(cfg, "rope_parameters", None) is not None:  # transformers 5
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": theta}
    return cfg


def make_model(d):
    torch.manual_seed(0)
    m = Qwen2ForCausalLM(config(SMALL)).to(torch.float32)
    # Non-zero biases and norms, so those code paths are compared too.
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    m.save_pretrained(d, safe_serialization=True)


def logits(d, ids, out, bf16=False):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    m = Qwen2ForCausalLM.from_pretrained(d, dtype=torch.float32).to(dev).eval()
    # Full-precision matmuls: the comparison is float32 against float32.
    torch.backends.cuda.matmul.allow_tf32 = False
    x = torch.tensor([[int(i) for i in ids.split(",")]], device=dev)
    with torch.no_grad(), torch.autocast(dev, dtype=torch.bfloat16, enabled=bf16):
        z = m(input_ids=x).logits[0].float().cpu()
    name = "transformers-" + dev + ("-autocast-bf16" if bf16 else "")
    json.dump({"device": name, "vocab": z.shape[-1], "logits": z.flatten().tolist()}, open(out, "w"))


def compare(a_path, b_path, tol=1e-3):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    ta, tb = torch.tensor(a["logits"]), torch.tensor(b["logits"])
    if ta.shape != tb.shape:
        print(f"shape mismatch: {a['device']} {tuple(ta.shape)} vs {b['device']} {tuple(tb.shape)}")
        return 1
    scale = ta.abs().max().item()
    err = (ta - tb).abs().max().item()
    ok = err <= tol * scale
    print(f"logits {a['device']} vs {b['device']}: max |diff| {err:.3g}, max |logit| {scale:.3g}, "
          f"relative {err / scale:.3g} (allowed {tol:g}) -> {'OK' if ok else 'FAIL'}")
    return 0 if ok else 1


def bench(batch, seq, steps, peak, bf16=False):
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    m = Qwen2ForCausalLM(config(QWEN05)).to(dev, torch.float32).train()
    n = batch * seq
    ids = (torch.arange(n, device=dev) * 7919 + 13) % QWEN05["vocab_size"]
    ids = ids.view(batch, seq)
    tgt = torch.roll(ids, -1, dims=1)

    def step():
        m.zero_grad(set_to_none=False)
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=bf16):
            z = m(input_ids=ids).logits
        logp = torch.log_softmax(z.float(), dim=-1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1)[:, :-1]
        loss = -logp.sum() / n
        loss.backward()
        return loss.item()  # a sync point, as cuda-bench's Download

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    el = (time.perf_counter() - t0) / steps
    c = QWEN05
    C, I, V, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    qd, kvd = c["num_attention_heads"] * 64, c["num_key_value_heads"] * 64
    # The same count as model.FlopsPerToken: matmuls, attention at t/2 keys.
    per_layer = 2 * C * (qd + 2 * kvd) + 2 * qd * C + 2 * 3 * C * I + 2 * 2 * qd * seq / 2
    flops_tok = L * per_layer + 2 * C * V
    tps = n / el
    r = {"device": "pytorch-" + torch.__version__ + "-eager-" + m.config._attn_implementation + ("-autocast-bf16" if bf16 else ""), "batch": batch,
         "seq": seq, "step_ms": el * 1e3, "tokens_per_s": tps, "tflops": 3 * flops_tok * tps / 1e12,
         "peak_bytes": torch.cuda.max_memory_allocated()}
    if peak:
        r["mfu"] = r["tflops"] / peak
    print(json.dumps(r))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("make-model"); s.add_argument("dir")
    s = sub.add_parser("logits"); s.add_argument("dir"); s.add_argument("ids"); s.add_argument("out")
    s.add_argument("--bf16", action="store_true")
    s = sub.add_parser("compare"); s.add_argument("a"); s.add_argument("b"); s.add_argument("--tol", type=float, default=1e-3)
    s = sub.add_parser("bench")
    s.add_argument("--batch", type=int, default=4); s.add_argument("--seq", type=int, default=512)
    s.add_argument("--steps", type=int, default=10); s.add_argument("--peak-tflops", type=float, default=0)
    s.add_argument("--bf16", action="store_true")
    a = p.parse_args()
    if a.cmd == "make-model":
        make_model(a.dir)
    elif a.cmd == "logits":
        logits(a.dir, a.ids, a.out, a.bf16)
    elif a.cmd == "compare":
        sys.exit(compare(a.a, a.b, a.tol))
    else:
        bench(a.batch, a.seq, a.steps, a.peak_tflops, a.bf16)


if __name__ == "__main__":
    main()
