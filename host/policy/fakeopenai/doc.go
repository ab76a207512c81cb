// Package fakeopenai is an in-process OpenAI-compatible server for tests. It
// speaks the real Chat Completions wire format (POST /v1/chat/completions,
// non-streaming, OpenAI's JSON shapes for replies and errors) and answers
// with a scripted Agent, so clients are exercised over real HTTP and JSON.
// GET /v1/models lists the ids given to SetModels.
//
// It deliberately implements nothing else of the API (no streaming, no
// legacy completions) and decides nothing by itself: what
// comes back, including errors, rate limits and odd replies, is up to the
// Agent. It does not depend on package testing, so other packages' tests
// and end-to-end harnesses can use it.
package fakeopenai
