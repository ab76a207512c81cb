// Package fakevllm is an in-process stand-in for a vLLM OpenAI server,
// for tests of training against an external server. It speaks vLLM's wire
// behaviour as vLLM's source defines it: the runtime LoRA routes
// (POST /v1/load_lora_adapter and /v1/unload_lora_adapter, mounted only
// when runtime updating is allowed, else FastAPI's bare 404), their
// payloads, plain-text successes and {"error": {message, type, param,
// code}} failures with the integer status as code; /v1/models listing the
// base model and every loaded adapter (root, parent); and chat completions
// that must name the base model or a loaded adapter.
//
// Text comes from an upstream OpenAI-compatible server (rlhost's embedded
// server, so rewards can really move): the fake checks and forwards. With
// no upstream, a fixed completion (Options.Respond) answers, for tests of
// the client alone. It deliberately does not generate, stream, batch or load
// weights itself; an upstream that implements the adapter routes (the
// embedded server) does the loading.
package fakevllm
