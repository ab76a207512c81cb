# The embedded default job: GRPO-style code writing with sandboxed rewards.
#
#   rlhost run examples/coding.hcl --dry-run
#
# Rollouts come from a shipped replay file, so this runs on a fresh machine
# with no network, no GPU and no API keys. To use a real model instead, switch
# run.policy to policy.openai (or pass --var policy=openai and point
# OPENAI_BASE_URL at vLLM). To run sandboxes on Daytona's cloud instead of
# this machine: DAYTONA_API_KEY=... rlhost run examples/coding.hcl --var backend=daytona

variable "backend" {
  default     = "local"
  description = "sandbox backend: local (this machine) or daytona (cloud)"
}

variable "policy" {
  default     = "replay"
  description = "replay (shipped completions) or openai (any OpenAI-compatible server)"
}

run {
  name        = "coding-demo"
  steps       = 4
  batch_size  = 2 # tasks per step
  group_size  = 7 # completions per task (the GRPO group)
  seed        = 1
  concurrency = 8 # episodes in flight at once
  policy      = var.policy
}

sandbox "local" {
  backend = var.backend
  timeout = "2s" # default wall-clock limit of one exec
  labels  = { team = "rl" }
}

env "coding" {
  plugin  = "coding" # built-in; a path such as "./my-env" loads an external plugin
  sandbox = sandbox.local
  tasks   = "builtin" # or a JSONL file, e.g. "coding/tasks.jsonl"
  timeout = "1s"      # per completion; a timeout scores -1
}

policy "replay" {
  provider = "replay"
  file     = "coding/completions.jsonl"
}

policy "openai" {
  provider    = "openai"
  base_url    = env("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
  model       = env("OPENAI_MODEL", "Qwen/Qwen2.5-0.5B-Instruct")
  api_key_env = "OPENAI_API_KEY"
  temperature = 1.0
  max_tokens  = 512
}

output {
  dir = "runs/${run.name}"
}
