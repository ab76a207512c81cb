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
// retokenises text. Update swaps weights between generations.
//
// It deliberately serves one model on loopback only, with no
// authentication, no prompt cache across requests, and no beam search.
package serve
