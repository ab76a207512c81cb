# The multi-turn quickstart: GRPO from scratch on a tool-using task, on a
# laptop CPU, in a few minutes.
#
#   rlhost run examples/quickstart-tools.hcl
#
# Every task says "Write f(x) as spec.txt describes." and leaves spec.txt
# in the sandbox's workspace ("f(x) returns x squared."). The agent has the
# MBPP env's read_file and write_file tools, one sandbox for the whole
# episode, and one test run: when it replies without a tool call,
# solution.py is tested (reward 1 when it passes, else 0).
#
# A 0.65M-parameter model starts from random weights and learns the
# conversation in a short supervised warm-up (quickstart-tools/warmup.jsonl):
# a quarter of its transcripts read spec.txt, then write the function it
# names; the rest write one of the six functions of the family without
# reading. Then GRPO trains on the episodes: reading first passes, guessing
# passes one time in six, so the reward rises as the policy learns to call
# read_file before anything else. The tool results are in the trained
# sequences as context, masked out of the loss, as in any MBPP run.
# quickstart-tools/gen regenerates the data.

variable "seed" {
  default     = 1
  description = "seeds the initial weights, the task order and sampling"
}

variable "warmup_steps" {
  default     = 400
  description = "supervised warm-up steps before GRPO"
}

run {
  name        = "quickstart-tools"
  steps       = 30
  batch_size  = 4 # tasks per step
  group_size  = 8 # episodes per task: the GRPO group
  seed        = var.seed
  concurrency = 8
  max_turns   = 4 # read, write, done, and one to spare
}

sandbox "local" {
  backend   = "local"
  timeout   = "5s"
  pool_size = 8
}

env "mbpp" {
  plugin        = "mbpp"
  sandbox       = sandbox.local
  dataset       = "quickstart-tools/tasks.jsonl"
  tools         = ["read_file", "write_file"]
  show_tests    = false # the spec is in the file, not the prompt
  max_attempts  = 1
  system_prompt = "You have read_file and write_file. Write solution.py, then reply Done."
  test_timeout  = "5s"
}

policy "student" {
  provider    = "embedded"
  init        = "1m"
  tokenizer   = "quickstart-tools/tokenizer.json"
  init_seed   = var.seed
  temperature = 1.0
  max_tokens  = 48 # per turn
}

trainer {
  learning_rate     = 0.0005
  lr_scheduler_type = "constant"
  warmup_steps      = 3
  beta              = 0.04 # KL to the warmed-up model
  micro_batch       = 8
  max_seq_len       = 512
  checkpoint_every  = 10

  warmup {
    file          = "quickstart-tools/warmup.jsonl"
    steps         = var.warmup_steps
    batch_size    = 16
    learning_rate = 0.003
  }
}

output {
  dir = "runs/${run.name}"
}
