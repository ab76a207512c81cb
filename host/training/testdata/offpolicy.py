"""Reference for off-policy training (run.max_off_policy_steps): which
episodes a step trains on, and the loss it trains them with, in PyTorch.

Reads a JSON list of cases on stdin. Each case has the loss settings of
trainer/grpo/testdata/trl_loss.py, the trainer's weights version "now",
the limit on an episode's age ("limit"), the sampling correction ("mode",
"clip_min", "clip_max") and its episodes ("episodes"): per episode, the
versions of the weights that sampled its turns, and per trained token the
log-prob under the current weights (logp), under the weights at the start
of the step (old) and as the sampler reported it (sampled), plus its
advantage.

An episode is trained when now minus its oldest turn's version is at most
the limit; the others are left out of the batch. For the kept ones the
importance-sampling weight of each token is TRL's vLLM correction, computed
here in PyTorch from old and sampled; then the loss is trl_loss.py's.
Writes a JSON list: per case the indices of the kept episodes, the loss
and d loss / d logp of the kept ones.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "trainer", "grpo", "testdata"))
import trl_loss  # noqa: E402


def weights(mode, clip_min, clip_max, old, sampled):
    old = torch.tensor(old, dtype=torch.float64)
    sampled = torch.tensor(sampled, dtype=torch.float64)
    log_ratio = old - sampled
    if mode.startswith("sequence"):
        w = torch.exp(log_ratio.sum()).expand_as(log_ratio).clone()
    else:
        w = torch.exp(log_ratio)
    if mode.endswith("truncate"):
        w = torch.clamp(w, min=clip_min, max=clip_max)
    else:
        w = torch.where((w < clip_min) | (w > clip_max), torch.zeros_like(w), w)
    return w.tolist()


def compute(case):
    kept, seqs = [], []
    for i, ep in enumerate(case["episodes"]):
        if case["now"] - min(ep["versions"]) > case["limit"]:
            continue
        kept.append(i)
        isw = weights(case["mode"], case["clip_min"], case["clip_max"], ep["old"], ep["sampled"]) if ep["old"] else []
        seqs.append({"logp": ep["logp"], "old": ep["old"], "ref": [], "isw": isw, "adv": ep["adv"]})
    loss_case = dict(case, seqs=seqs, beta=0.0)
    loss_case["num_items_in_batch"] = sum(len(s["logp"]) for s in seqs)
    out = trl_loss.compute(loss_case)
    return {"kept": kept, "loss": out["loss"], "grad": out["grad"]}


def main():
    cases = json.load(sys.stdin)
    json.dump([compute(c) for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
