# The flagship job: an agent solves MBPP-format problems with tools (bash,
# read_file, write_file) in a sandbox that persists across all its turns and
# attempts. When the hidden tests fail, it gets the failure back and tries
# again, in the same sandbox.
#
# Training a model you downloaded elsewhere (Qwen2.5-0.5B-Instruct is a good
# start; docs/training.md says what it costs on a CPU):
#
#   rlhost run examples/mbpp.hcl --var model=/path/to/Qwen2.5-0.5B-Instruct
#
# Rollouts only, against any OpenAI-compatible server (vLLM, OpenAI), like
# ART's `--use-openai --dry-run`:
#
#   OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_MODEL=Qwen/Qwen2.5-7B-Instruct \
#     rlhost run examples/mbpp.hcl --var policy=openai --dry-run
#
# Offline, with scripted agents replayed from a file (no server needed):
#
#   rlhost run examples/mbpp.hcl --var policy=replay --dry-run
#
# Real MBPP: point --var dataset=... at a file you downloaded elsewhere (see
# the README's MBPP section); nothing is downloaded at run time.

variable "policy" {
  default     = "embedded"
  description = "embedded (train var.model), openai (any OpenAI-compatible server) or replay (scripted agents)"
}

variable "model" {
  default     = ""
  description = "a Hugging Face model directory to train, e.g. $PWD/models/Qwen2.5-0.5B-Instruct (docs/training.md#your-own-model-and-data says how to get one). To try this job without a model: rlhost run examples/mbpp.hcl --var policy=replay --dry-run"
}

variable "dataset" {
  default     = "mbpp/sample.jsonl"
  description = "MBPP .jsonl, sanitized .json, or HF-layout .parquet file or directory"
}

variable "backend" {
  default = "local"
}

run {
  name            = "mbpp"
  steps           = 4
  batch_size      = 4  # problems per step
  group_size      = 4  # episodes per problem
  seed            = 1
  concurrency     = 16
  max_turns       = 12 # policy calls per episode
  episode_timeout = "10m"
  policy          = var.policy
}

sandbox "local" {
  backend = var.backend
  timeout = "30s"
  limits {
    memory = "512MiB"
    # Aviato and Daytona size a whole sandbox and have no pids limit.
    pids = var.backend == "local" ? 128 : null
  }
}

env "mbpp" {
  plugin           = "mbpp"
  sandbox          = sandbox.local
  dataset          = var.dataset
  shuffle          = true
  seed             = 1
  tools            = ["bash", "read_file", "write_file"]
  max_attempts     = 3
  attempt_discount = 1.0
  bash_timeout     = "30s"
  test_timeout     = "10s"
}

policy "embedded" {
  provider    = "embedded"
  model       = var.model
  temperature = 1.0
  max_tokens  = 512
}

policy "openai" {
  provider    = "openai"
  base_url    = env("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
  model       = env("OPENAI_MODEL", "Qwen/Qwen2.5-7B-Instruct")
  api_key_env = "OPENAI_API_KEY"
  temperature = 0.7
  max_tokens  = 1024
}

policy "replay" {
  provider = "replay"
  file     = "mbpp/replay.jsonl"
}

trainer {
  loss_type         = "dapo"
  learning_rate     = 1e-6
  lr_scheduler_type = "constant"
  micro_batch       = 1
  max_seq_len       = 2048 # training needs about 17.6 GiB at 0.5B (11.2 GiB at 1024)
  checkpoint_every  = 1
}

output {
  dir = "runs/${run.name}"
}
