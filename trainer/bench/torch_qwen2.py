"""PyTorch yardstick for trainer/bench: a plain Qwen2 decoder written out
by hand (no transformers), at the shapes of rlhost's presets, timed the
way trainer/bench times rlhost's own model.

Run with Debian's /usr/bin/python3 and python3-torch (OpenBLAS). It prints
one JSON object per line, each {"what": ..., plus figures}; bench's Go
side reads them and puts them next to its own figures. It checks no
results: the model only has to cost what a Qwen2 costs.
"""

import argparse
import json
import math
import os
import time

import torch
import torch.nn.functional as F

PRESETS = {
    # hidden, intermediate, layers, heads, kv heads, head dim, vocab
    "10m": (256, 768, 8, 8, 2, 32, 8192, 1e6),
    "qwen2.5-0.5b": (896, 4864, 24, 14, 2, 64, 151936, 1e6),
}


class Qwen2(torch.nn.Module):
    """Qwen2: RMSNorm, GQA attention with q/k/v biases and RoPE, SwiGLU MLP,
    tied embeddings."""

    def __init__(self, preset):
        super().__init__()
        c, i, l, hq, hkv, hd, v, theta = PRESETS[preset]
        self.c, self.hq, self.hkv, self.hd, self.v = c, hq, hkv, hd, v
        self.embed = torch.nn.Parameter(torch.randn(v, c) * 0.02)
        self.layers = torch.nn.ModuleList()
        for _ in range(l):
            m = torch.nn.Module()
            m.ln1 = torch.nn.Parameter(torch.ones(c))
            m.q = torch.nn.Linear(c, hq * hd)
            m.k = torch.nn.Linear(c, hkv * hd)
            m.v = torch.nn.Linear(c, hkv * hd)
            m.o = torch.nn.Linear(hq * hd, c, bias=False)
            m.ln2 = torch.nn.Parameter(torch.ones(c))
            m.gate = torch.nn.Linear(c, i, bias=False)
            m.up = torch.nn.Linear(c, i, bias=False)
            m.down = torch.nn.Linear(i, c, bias=False)
            self.layers.append(m)
        self.norm = torch.nn.Parameter(torch.ones(c))
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    @staticmethod
    def rms(x, w, eps=1e-6):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def rope(self, x, pos):
        # x [B, h, T, hd]; rotate halves, as Qwen2 does.
        f = pos[:, None].double() * self.inv_freq[None, :]
        cos = torch.cat([f.cos(), f.cos()], -1).float()
        sin = torch.cat([f.sin(), f.sin()], -1).float()
        h = self.hd // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos + rot * sin

    def forward(self, ids, cache=None, start=0):
        """ids [B, T]; cache is a list of (k, v) [B, hkv, maxT, hd] per
        layer, filled at start..start+T (decode), or None (training)."""
        B, T = ids.shape
        x = F.embedding(ids, self.embed)
        pos = torch.arange(start, start + T)
        grp = self.hq // self.hkv
        for li, m in enumerate(self.layers):
            h = self.rms(x, m.ln1)
            q = m.q(h).view(B, T, self.hq, self.hd).transpose(1, 2)
            k = m.k(h).view(B, T, self.hkv, self.hd).transpose(1, 2)
            v = m.v(h).view(B, T, self.hkv, self.hd).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            if cache is not None:
                kc, vc = cache[li]
                kc[:, :, start:start + T] = k
                vc[:, :, start:start + T] = v
                k, v = kc[:, :, :start + T], vc[:, :, :start + T]
            k = k.repeat_interleave(grp, dim=1)
            v = v.repeat_interleave(grp, dim=1)
            s = q @ k.transpose(-1, -2) / math.sqrt(self.hd)
            if T > 1:
                n = k.shape[2]
                mask = torch.ones(T, n, dtype=torch.bool).tril(n - T)
                s = s.masked_fill(~mask, float("-inf"))
            a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, self.hq * self.hd)
            x = x + m.o(a)
            h = self.rms(x, m.ln2)
            x = x + m.down(F.silu(m.gate(h)) * m.up(h))
        return self.rms(x, self.norm) @ self.embed.t()


def timed(fn, min_time):
    fn()  # warm-up
    n, t0 = 0, time.perf_counter()
    while n < 1 or time.perf_counter() - t0 < min_time:
        fn()
        n += 1
    return (time.perf_counter() - t0) / n


def train(preset, B, T, adam, min_time):
    torch.manual_seed(1)
    model = Qwen2(preset)
    ids = torch.randint(0, model.v, (B, T))
    tgt = torch.randint(0, model.v, (B, T))

    def step():
        model.zero_grad(set_to_none=False)
        lp = model(ids).log_softmax(-1).gather(-1, tgt[..., None])
        lp.mean().backward()

    s = timed(step, min_time)
    out = {"what": "train", "preset": preset, "B": B, "T": T, "step_s": s, "tok_s": B * T / s}
    if adam:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
        opt.step()  # allocates the moment buffers
        t0 = time.perf_counter()
        opt.step()
        out["adamw_s"] = time.perf_counter() - t0
        out["params"] = sum(p.numel() for p in model.parameters())
    return out


@torch.no_grad()
def decode(preset, B, prompt, tokens):
    torch.manual_seed(1)
    model = Qwen2(preset)
    maxT = prompt + tokens
    cache = [(torch.zeros(B, model.hkv, maxT, model.hd), torch.zeros(B, model.hkv, maxT, model.hd))
             for _ in model.layers]
    ids = torch.randint(0, model.v, (B, prompt))
    t0 = time.perf_counter()
    logits = model(ids, cache, 0)[:, -1]
    n = 0
    for i in range(tokens):
        nxt = torch.multinomial(logits.softmax(-1), 1)
        n += B
        if i == tokens - 1:
            break
        logits = model(nxt, cache, prompt + i)[:, -1]
    s = time.perf_counter() - t0
    return {"what": "decode", "preset": preset, "B": B, "prompt": prompt, "tokens": tokens, "tok_s": n / s}


def sgemm(n, min_time):
    a, b = torch.rand(n, n), torch.rand(n, n)
    s = timed(lambda: torch.mm(a, b), min_time)
    return {"what": "sgemm", "n": n, "threads": torch.get_num_threads(), "gflops": 2 * n ** 3 / s / 1e9}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sgemm", type=int, default=0, help="only time an n³ torch.mm")
    ap.add_argument("--train", default="", help="preset to time fwd+bwd for")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--adam", action="store_true")
    ap.add_argument("--decode", default="", help="preset to time KV-cache decoding for")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--min-time", type=float, default=5.0)
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    if a.sgemm:
        print(json.dumps(sgemm(a.sgemm, min(a.min_time, 2.0))), flush=True)
    if a.train:
        print(json.dumps(train(a.train, a.batch, a.seq, a.adam, a.min_time)), flush=True)
    if a.decode:
        print(json.dumps(decode(a.decode, a.batch, a.prompt, a.tokens)), flush=True)


if __name__ == "__main__":
    main()
