// Package fakevllm is an in-process stand-in for a vLLM OpenAI server,
// for tests of training against an external server and for simulating a
// cluster of them on one machine. It speaks vLLM's wire behaviour as
// vLLM's source defines it: the runtime LoRA routes
// (POST /v1/load_lora_adapter and /v1/unload_lora_adapter, mounted only
// when runtime updating is allowed, else FastAPI's bare 404), their
// payloads, plain-text successes and {"error": {message, type, param,
// code}} failures with the integer status as code; /v1/models listing the
// base model and every loaded adapter (root, parent); and chat completions
// that must name the base model or a loaded adapter.
//
// Text comes from one of three places: an upstream OpenAI-compatible
// server (rlhost's embedded server, so rewards can really move), which the
// fake checks and forwards to; a scripted Agent, which sees each request's
// messages and tools and writes the replies (tool calls included), to
// which the fake adds token ids and log-probs as vLLM's return_token_ids
// does (see tokens.go); or a fixed completion (Options.Respond), for tests
// of the client alone.
//
// With Options.Throughput, every answer is held for as long as a GPU
// would take to generate it among the other requests in flight (see
// Throughput), and Stats (also served as JSON at StatsRoute, which is the
// fake's own route, not vLLM's) says how busy the server was.
//
// It deliberately does not stream, load weights or model sampling; an
// upstream that implements the adapter routes (the embedded server) does
// the loading.
package fakevllm
