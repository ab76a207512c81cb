package fakeopenai

import (
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/rlhost/rlhost/core"
)

// Text is a plain assistant reply.
func Text(s string) ReplyChoice { return ReplyChoice{Content: s} }

// ToolCall is a reply that calls one function. argsJSON goes out verbatim,
// malformed or not, as a model's would.
func ToolCall(name, argsJSON string) ReplyChoice {
	return ReplyChoice{ToolCalls: []core.ToolCall{Call(name, argsJSON)}}
}

// Call builds one tool call for ReplyChoice.ToolCalls; the server fills in
// its ID.
func Call(name, argsJSON string) core.ToolCall {
	return core.ToolCall{Type: "function", Function: core.FunctionCall{Name: name, Arguments: argsJSON}}
}

// Always answers every request with the same choices.
func Always(choices ...ReplyChoice) Agent {
	return func(ChatRequest) Reply { return Reply{Choices: choices} }
}

// Script answers turn k (the number of assistant messages already in the
// conversation) with turns[k], so one Script plays a whole multi-turn
// episode and several episodes can share it concurrently. A turn past the
// script is a 400, which clients do not retry.
func Script(turns ...ReplyChoice) Agent {
	return func(req ChatRequest) Reply {
		k := req.Turn()
		if k >= len(turns) {
			return Error(http.StatusBadRequest, "", fmt.Sprintf("fakeopenai: script has no turn %d (it has %d)", k, len(turns)))
		}
		return Reply{Choices: []ReplyChoice{turns[k]}}
	}
}

// Error is an error reply in OpenAI's shape.
func Error(status int, code, message string) Reply {
	return Reply{Status: status, ErrorCode: code, ErrorMessage: message}
}

// RateLimited is OpenAI's 429 reply, with a Retry-After header when
// retryAfter is not empty.
func RateLimited(retryAfter string) Reply {
	r := Error(http.StatusTooManyRequests, "rate_limit_exceeded",
		"Rate limit reached for requests. Please try again later.")
	r.RetryAfter = retryAfter
	return r
}

// ContextLengthExceeded is OpenAI's reply to a prompt over the context window.
func ContextLengthExceeded() Reply {
	return Error(http.StatusBadRequest, "context_length_exceeded",
		"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.")
}

// VLLMContextLengthExceeded is the same complaint as older vLLM servers send
// it: a 400 with the error at the top level and an integer code.
func VLLMContextLengthExceeded() Reply {
	return Reply{Status: http.StatusBadRequest, RawBody: `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4488 in the messages, 512 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`}
}

// FailFirst answers its first n calls with an error of the given status
// (OpenAI's rate-limit reply for 429) and passes the rest to then.
func FailFirst(n int, status int, then Agent) Agent {
	var calls atomic.Int64
	return func(req ChatRequest) Reply {
		if calls.Add(1) <= int64(n) {
			if status == http.StatusTooManyRequests {
				return RateLimited("")
			}
			return Error(status, "", fmt.Sprintf("fakeopenai: scripted failure %d", status))
		}
		return then(req)
	}
}

// RequireKey answers 401 invalid_api_key, as OpenAI does, unless the client
// sent key as its bearer token.
func RequireKey(key string, then Agent) Agent {
	return func(req ChatRequest) Reply {
		if req.APIKey() != key {
			return Error(http.StatusUnauthorized, "invalid_api_key",
				"Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.")
		}
		return then(req)
	}
}
