// Package serve is the trainer's embedded policy server: the current
// weights of a *model.Model behind an OpenAI-compatible
// /v1/chat/completions on loopback, so the host's episode loop reaches the
// policy being trained through the same client it uses for any endpoint.
//
// One engine goroutine owns the model and a KV cache of MaxBatch slots and
// runs continuous batching: requests join between decode iterations and
// leave when they finish, prompts are prefilled packed into one forward
// pass, a prompt shared by n choices is prefilled once and its keys and
// values copied, and every sampled token id and log-prob is returned
// (vLLM's return_token_ids, OpenAI logprobs) so training never
// retokenises text. A finished sequence's keys and values stay in its
// idle slot (the prefix cache): a request whose prompt starts with cached
// tokens, as a conversation's next turn repeats the whole conversation,
// computes only the rest; a slot needed for a new sequence evicts the
// least recently used. Update swaps weights between generations and
// empties the prefix cache.
//
// On a device whose linear layers are batch-invariant (the CPU backend's
// compute.RowLinear), a sequence's logits do not depend on which other
// requests share its forward passes or on what the prefix cache supplied,
// and sampling is keyed by (seed, choice, position), so a request with a
// seed gets the same tokens at any load.
//
// It deliberately serves one model on loopback only, with no
// authentication and no beam search.
package serve
