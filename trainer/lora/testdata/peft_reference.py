"""Reference for trainer/lora's PEFT tests, in PyTorch without peft or
transformers (neither is packaged for Debian).

It writes a LoRA adapter the way PEFT's save_pretrained lays one out
(adapter_config.json, and adapter_model.safetensors with the keys
get_peft_model_state_dict produces, "base_model.model.<module>.lora_A.weight"
of shape [r, in] and "lora_B.weight" of shape [out, r]), and computes the
logits of base + adapter with Qwen2's forward written from
transformers' modeling_qwen2.py formulas and PEFT's LoRA Linear forward,
y = base(x) + lora_B(lora_A(x)) * scaling, scaling = alpha/r or, with
use_rslora, alpha/sqrt(r). Everything runs in float64.

Input (stdin, JSON): a list of cases, each with base (an HF model
directory with config.json and a float32 model.safetensors), out (the
adapter directory to write), ids, r, alpha, rslora, targets (HF module
names), seed. Output (stdout, JSON): per case {"logits": [[...] per
position]}.
"""
import json
import math
import os
import struct
import sys

import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit("reference reads F32 only, %s is %s" % (name, info["dtype"]))
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + a : base + b]), dtype=torch.float32)
        out[name] = t.reshape(info["shape"]).double()
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        raw = t.float().contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def rms(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def case(args):
    cfg = json.load(open(os.path.join(args["base"], "config.json")))
    W = read_safetensors(os.path.join(args["base"], "model.safetensors"))
    C = cfg["hidden_size"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim", C // H)
    L, eps, theta = cfg["num_hidden_layers"], cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    r, alpha = args["r"], args["alpha"]
    scaling = alpha / math.sqrt(r) if args["rslora"] else alpha / r

    # The adapter: random A and B (PEFT initialises B to zero, which would
    # make the test blind), saved under PEFT's keys.
    g = torch.Generator().manual_seed(args["seed"])
    adapter = {}
    for l in range(L):
        for mod in args["targets"]:
            path = ("self_attn." if mod in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp.") + mod
            w = W["model.layers.%d.%s.weight" % (l, path)]
            out_f, in_f = w.shape
            key = "base_model.model.model.layers.%d.%s" % (l, path)
            adapter[key + ".lora_A.weight"] = (torch.rand(r, in_f, generator=g, dtype=torch.float64) * 2 - 1) / math.sqrt(in_f)
            adapter[key + ".lora_B.weight"] = torch.randn(out_f, r, generator=g, dtype=torch.float64) * 0.2
    # Round to float32 as stored, so both sides use the same factors.
    adapter = {k: v.float().double() for k, v in adapter.items()}
    os.makedirs(args["out"], exist_ok=True)
    write_safetensors(os.path.join(args["out"], "adapter_model.safetensors"), adapter)
    with open(os.path.join(args["out"], "adapter_config.json"), "w") as f:
        json.dump({
            "alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": args["base"],
            "bias": "none", "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True,
            "layers_pattern": None, "layers_to_transform": None, "loftq_config": {},
            "lora_alpha": alpha, "lora_dropout": 0.05, "megatron_config": None, "megatron_core": "megatron.core",
            "modules_to_save": None, "peft_type": "LORA", "r": r, "rank_pattern": {}, "revision": None,
            "target_modules": list(reversed(args["targets"])), "task_type": "CAUSAL_LM",
            "use_dora": False, "use_rslora": args["rslora"],
        }, f, indent=2)

    def linear(x, l, path, mod):
        name = "model.layers.%d.%s.%s" % (l, path, mod)
        y = x @ W[name + ".weight"].T
        if name + ".bias" in W:
            y = y + W[name + ".bias"]
        key = "base_model.model." + name
        if key + ".lora_A.weight" in adapter:
            y = y + (x @ adapter[key + ".lora_A.weight"].T) @ adapter[key + ".lora_B.weight"].T * scaling
        return y

    ids = torch.tensor(args["ids"])
    T = len(args["ids"])
    x = W["model.embed_tokens.weight"][ids]
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(L):
        h = rms(x, W["model.layers.%d.input_layernorm.weight" % l], eps)
        q = linear(h, l, "self_attn", "q_proj").view(T, H, D).transpose(0, 1)
        k = linear(h, l, "self_attn", "k_proj").view(T, KV, D).transpose(0, 1)
        v = linear(h, l, "self_attn", "v_proj").view(T, KV, D).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // KV, 0), v.repeat_interleave(H // KV, 0)
        att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(D) + mask, -1)
        o = (att @ v).transpose(0, 1).reshape(T, H * D)
        x = x + linear(o, l, "self_attn", "o_proj")
        h = rms(x, W["model.layers.%d.post_attention_layernorm.weight" % l], eps)
        m = torch.nn.functional.silu(linear(h, l, "mlp", "gate_proj")) * linear(h, l, "mlp", "up_proj")
        x = x + linear(m, l, "mlp", "down_proj")
    x = rms(x, W["model.norm.weight"], eps)
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return {"logits": (x @ head.T).tolist()}


def main():
    json.dump([case(c) for c in json.load(sys.stdin)], sys.stdout)


if __name__ == "__main__":
    main()
