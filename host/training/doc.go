// Package training turns a run into a training job. It builds the policy
// being trained (a model on a compute backend, the GRPO trainer, and the
// embedded OpenAI-compatible server that samples from it), converts each
// step's trajectories into GRPO samples from the exact token ids the server
// sampled, and is the runner's step sink that applies the update, writes
// checkpoints and draws the reward curve.
//
// It holds no numerics (trainer/grpo does) and no episode logic
// (host/runner does). It never retokenises text to train on: a turn
// without sampled token ids is an error, not a guess.
package training
