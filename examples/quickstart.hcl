# The quickstart: GRPO from scratch on a laptop CPU, in a few minutes.
#
#   rlhost run examples/quickstart.hcl        (or: make run)
#
# A 0.64M-parameter model starts from random weights and learns the answer
# format in a short supervised warm-up (quickstart/warmup.jsonl: every
# answer means the right function, but only a quarter are written so that
# the tests pass; the rest print the value or return it as a string). Then
# it trains with GRPO on six "Write f(x) that returns x squared." tasks.
# Every completion runs in its own local sandbox against the task's tests;
# the reward is the fraction of tests passed (-1 for code that does not
# run). The reward rises because only the working style earns reward, and
# GRPO moves probability towards the completions of a group that scored
# above the group's mean. quickstart/gen regenerates the data.

variable "seed" {
  default     = 1
  description = "seeds the initial weights, the task order and sampling"
}

variable "warmup_steps" {
  default     = 200
  description = "supervised warm-up steps before GRPO"
}

run {
  name        = "quickstart"
  steps       = 100
  batch_size  = 4  # tasks per step
  group_size  = 8  # completions per task: the GRPO group
  seed        = var.seed
  concurrency = 8
}

sandbox "local" {
  backend   = "local"
  timeout   = "5s"
  pool_size = 8 # the run's concurrency, ready before the first episode; used sandboxes are reset (every process killed, /tmp, /workspace, ... emptied) and reused
}

env "coding" {
  plugin        = "coding"
  sandbox       = sandbox.local
  tasks         = "quickstart/tasks.jsonl"
  system_prompt = "Answer with Python code only."
  timeout       = "2s"
}

policy "student" {
  provider    = "embedded"        # the trainer's own server, sampling the weights being trained
  init        = "1m"              # a fresh random model of this preset ...
  tokenizer   = "quickstart/tokenizer.json" # ... sized to this tokenizer
  init_seed   = var.seed
  temperature = 1.0
  max_tokens  = 24
}

trainer {
  learning_rate    = 0.0005 # decays linearly to 0 over the run (TRL's default schedule)
  warmup_steps     = 3      # ramp the LR over the first updates: Adam's fresh moments make them large
  beta             = 0.04   # KL to the warmed-up model: keeps each task near the function the warm-up taught
  loss_type        = "dapo"
  micro_batch      = 16
  max_seq_len      = 64
  max_grad_norm    = 1.0
  checkpoint_every = 20

  warmup {
    file          = "quickstart/warmup.jsonl"
    steps         = var.warmup_steps
    batch_size    = 16
    learning_rate = 0.003
  }
}

output {
  dir = "runs/${run.name}"
}
