// Package grpo trains a policy model with Group Relative Policy
// Optimization, following the semantics of TRL's GRPOTrainer: group
// advantages, the clipped importance-ratio loss with its grpo, bnpo,
// dr_grpo and dapo normalisations, token- or sequence-level importance
// sampling, an optional k3 KL penalty to a frozen reference, num_iterations
// reuse of a batch, AdamW with global grad-norm clipping and a learning-rate
// schedule, micro-batched gradient accumulation, and exact checkpoints.
//
// Trainer.Step is the whole GRPO step in one function: advantages,
// forward, loss, backward, clip, update, stats. The loss itself is the pure
// function Loss, so it can be checked against a PyTorch transcription of
// TRL's _compute_loss (testdata/trl_loss.py).
//
// It deliberately does no sampling, scoring or tokenising: callers bring
// groups of token sequences that were sampled elsewhere (trainer/serve or
// an external server), with a mask of the tokens the policy sampled and a
// reward per sequence. See docs/grpo.md.
package grpo
