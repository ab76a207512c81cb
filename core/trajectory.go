package core

import (
	"encoding/json"
	"time"
)

// Task is one problem an environment can pose. Data is environment-specific
// and opaque to the host.
type Task struct {
	ID     string          `json:"id"`
	Prompt string          `json:"prompt,omitempty"`
	Data   json.RawMessage `json:"data,omitempty"`
}

// Finish reasons an episode can end with.
const (
	FinishDone             = "done"
	FinishPassed           = "passed"
	FinishAttemptsExceeded = "attempts_exhausted"
	FinishMaxTurns         = "max_turns"
	FinishContextLimit     = "context_limit"
	FinishTimeout          = "timeout"
	FinishError            = "error"
	FinishCancelled        = "cancelled"
)

// Turn records one policy call of an episode: timings and server-reported usage.
type Turn struct {
	Index     int     `json:"index"`
	PolicyMS  float64 `json:"policy_ms"`
	EnvMS     float64 `json:"env_ms"`
	Usage     Usage   `json:"usage"`
	ToolCalls int     `json:"tool_calls"`
	Empty     bool    `json:"empty,omitempty"`
	Error     string  `json:"error,omitempty"`

	// What training needs, when the policy server returns it (the embedded
	// server always; vLLM with return_token_ids). MessageIndex is the
	// position in Trajectory.Messages of the assistant message this turn
	// produced (-1 when the policy call failed). PromptTokenIDs are the
	// tokens the server conditioned on; TokenIDs the tokens it sampled, the
	// final stop token included; LogProbs their log-probabilities at the
	// sampling temperature. Only TokenIDs are trained: prompt, tool and user
	// tokens are masked out.
	MessageIndex   int       `json:"message_index"`
	PromptTokenIDs []int     `json:"prompt_token_ids,omitempty"`
	TokenIDs       []int     `json:"token_ids,omitempty"`
	LogProbs       []float32 `json:"logprobs,omitempty"`
	// StopReason is the server's finish reason: stop, length (truncated),
	// tool_calls.
	StopReason string `json:"stop_reason,omitempty"`
	// WeightsVersion is the version of the weights that sampled every
	// token of this turn, when the server says: the number of training
	// steps applied to them (0 before the first). A turn never mixes two
	// versions.
	WeightsVersion *int `json:"weights_version,omitempty"`
}

// Trajectory is one finished episode: one line of trajectories.jsonl.
type Trajectory struct {
	RunID        string             `json:"run_id"`
	Step         int                `json:"step"`
	Group        int                `json:"group"`
	Index        int                `json:"index"` // position inside the group
	TaskID       string             `json:"task_id"`
	Env          string             `json:"env"`
	Messages     []Message          `json:"messages"`
	Tools        []ToolSpec         `json:"tools,omitempty"`
	Reward       float64            `json:"reward"`
	Metrics      map[string]float64 `json:"metrics,omitempty"`
	Info         map[string]string  `json:"info,omitempty"`
	FinishReason string             `json:"finish_reason"`
	SandboxID    string             `json:"sandbox_id,omitempty"`
	Turns        []Turn             `json:"turns,omitempty"`
	StartedAt    time.Time          `json:"started_at"`
	DurationMS   float64            `json:"duration_ms"`
	Error        string             `json:"error,omitempty"`
}

// StepMetrics is one line of metrics.jsonl: the aggregate over a step.
type StepMetrics struct {
	RunID      string             `json:"run_id"`
	Step       int                `json:"step"`
	Episodes   int                `json:"episodes"`
	RewardMean float64            `json:"reward_mean"`
	RewardStd  float64            `json:"reward_std"`
	RewardMin  float64            `json:"reward_min"`
	RewardMax  float64            `json:"reward_max"`
	PassRate   float64            `json:"pass_rate"`
	Errors     int                `json:"errors"`
	Timeouts   int                `json:"timeouts"`
	DurationMS float64            `json:"duration_ms"`
	Extra      map[string]float64 `json:"extra,omitempty"`
}
