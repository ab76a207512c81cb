"""Reference for grpo.Loss: the loss of TRL's GRPOTrainer._compute_loss,
written out in PyTorch from TRL's published source, run in float64.

Reads a JSON list of cases on stdin. Each case has the settings
(type, epsilon, epsilon_high, beta, level, max_completion_length,
sapo_temperature_pos, sapo_temperature_neg, accum_steps,
num_items_in_batch) and sequences (logp, old, ref, adv: the
log-probs of each sequence's trained tokens; isw: optional per-token
sampling-correction weights, TRL's importance_sampling_ratio). Sequences are right-padded
into (B, T) tensors with a 0/1 mask, as TRL holds them. Writes a JSON list
with the loss, d loss / d logp (autograd, padding dropped) and the metrics
per case.
"""
import json
import sys

import torch


def compute(case):
    seqs = case["seqs"]
    for s in seqs:  # Go writes empty slices as null
        for k in ("logp", "old", "ref", "isw"):
            s[k] = s[k] or []
    B = len(seqs)
    T = max([len(s["logp"]) for s in seqs] + [1])
    logp = torch.zeros(B, T, dtype=torch.float64)
    old = torch.zeros(B, T, dtype=torch.float64)
    ref = torch.zeros(B, T, dtype=torch.float64)
    mask = torch.zeros(B, T, dtype=torch.float64)
    # The sampling correction (TRL's importance_sampling_ratio), 1 at
    # padding and when the case has none.
    isw = torch.ones(B, T, dtype=torch.float64)
    for i, s in enumerate(seqs):
        n = len(s["logp"])
        logp[i, :n] = torch.tensor(s["logp"], dtype=torch.float64)
        old[i, :n] = torch.tensor(s["old"], dtype=torch.float64)
        if case["beta"] != 0:
            ref[i, :n] = torch.tensor(s["ref"], dtype=torch.float64)
        mask[i, :n] = 1
        if s.get("isw"):
            isw[i, :n] = torch.tensor(s["isw"], dtype=torch.float64)
    # Padding positions hold arbitrary values in TRL; make them non-trivial
    # so that a missing mask would show.
    logp = logp + (1 - mask) * -0.7
    per_token_logps = logp.clone().requires_grad_(True)
    advantages = torch.tensor([s["adv"] for s in seqs], dtype=torch.float64).unsqueeze(1)
    eps_low, eps_high, beta = case["epsilon"], case["epsilon_high"], case["beta"]

    log_ratio = per_token_logps - old
    if case["level"] == "token":
        log_importance_weights = log_ratio
    else:
        log_importance_weights = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        log_importance_weights = log_importance_weights.unsqueeze(-1)
    coef_1 = torch.exp(log_importance_weights)
    if beta != 0.0:
        per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
    t = case["type"]
    if t == "cispo":
        # The ratio, capped at epsilon_high, weighs log pi as a constant.
        capped = torch.clamp(coef_1, max=eps_high).detach()
        per_token_loss = -capped * advantages * per_token_logps
    elif t == "sapo":
        # A sigmoid gate instead of the hard clip, with its own temperature
        # for positive and for other advantages.
        tau = torch.where(advantages > 0, torch.full_like(advantages, case["sapo_temperature_pos"]),
                          torch.full_like(advantages, case["sapo_temperature_neg"]))
        gate = torch.sigmoid(tau * (coef_1 - 1)) * 4 / tau
        per_token_loss = -gate * advantages
    else:
        coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
        per_token_loss1 = coef_1 * advantages
        per_token_loss2 = coef_2 * advantages
        per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
    per_token_loss = per_token_loss * isw
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * per_token_kl

    accum = case["accum_steps"]
    if t in ("grpo", "sapo"):
        loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accum
    elif t == "bnpo":
        loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0) / accum
    elif t == "dr_grpo":
        loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * case["max_completion_length"]) / accum
    elif t in ("dapo", "cispo"):
        normalizer = torch.tensor(float(case["num_items_in_batch"])).clamp(min=1.0)
        loss = (per_token_loss * mask).sum() / normalizer
    else:
        raise ValueError(t)
    loss.backward()
    grad = per_token_logps.grad

    def global_masked_mean(x, per_sequence):
        # TRL tells per-sequence values by x.shape[1] == 1, which also
        # matches a token-level batch whose longest completion is 1 token;
        # here the caller says which it is.
        if per_sequence:
            return (x.sum() / max(x.shape[0], 1)).item()
        return ((x * mask).sum() / mask.sum().clamp(min=1.0)).item()

    seq_level = case["level"] == "sequence"
    if t == "cispo":
        # cispo_clip_ratio; rlhost reports it as the high fraction.
        is_low = torch.zeros_like(coef_1)
        is_high = ((coef_1 > eps_high) & (advantages > 0)).double()
    elif t == "sapo":
        # sapo clips nothing and TRL logs no clip ratio.
        is_low = is_high = torch.zeros_like(coef_1)
    else:
        is_low = ((coef_1 < 1 - eps_low) & (advantages < 0)).double()
        is_high = ((coef_1 > 1 + eps_high) & (advantages > 0)).double()
    out = {
        "loss": loss.item(),
        "grad": [grad[i, : len(s["logp"])].tolist() for i, s in enumerate(seqs)],
        "clip_low": global_masked_mean(is_low, seq_level),
        "clip_high": global_masked_mean(is_high, seq_level),
        "clip_region": global_masked_mean(((is_low + is_high) > 0).double(), seq_level),
    }
    if beta != 0.0:
        out["kl"] = global_masked_mean(per_token_kl.detach(), False)
    return out


def main():
    cases = json.load(sys.stdin)
    json.dump([compute(c) for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
