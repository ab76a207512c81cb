// Package policy holds the host's policy clients: what the episode runner
// asks for the next assistant message(s) of a conversation. A Config (one HCL
// `policy` block) picks a provider: "replay" answers from a JSONL file of
// recorded or scripted completions, "openai" calls any OpenAI-compatible Chat
// Completions endpoint (OpenAI, vLLM, SGLang, llama.cpp) with retries.
//
// The package deliberately knows nothing about episodes, rewards or
// tokenisation: it turns a conversation plus tools into assistant messages
// and reports the server's usage. Counting empty replies, stopping episodes
// on ErrContextLength and aborting a run on ErrRejected are the runner's job.
package policy
