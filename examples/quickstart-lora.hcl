# The quickstart with LoRA: the same task, training a LoRA adapter on a
# frozen base instead of every weight.
#
#   rlhost run examples/quickstart-lora.hcl
#
# The base is the quickstart's fresh random 0.64M-parameter model. The
# supervised warm-up fine-tunes all of it (a random model cannot learn the
# answer format through an adapter; a pretrained base would not need
# this); GRPO then freezes it and trains only the adapter (rank 16 on
# every projection of every layer): gradients and AdamW state exist for
# the adapter alone. The run writes the merged model to runs/quickstart-lora/final
# and the adapter in PEFT layout to runs/quickstart-lora/adapter.
# See docs/lora.md.

variable "seed" {
  default     = 1
  description = "seeds the initial weights, the task order and sampling"
}

variable "warmup_steps" {
  default     = 200
  description = "supervised warm-up steps before GRPO"
}

run {
  name        = "quickstart-lora"
  steps       = 40
  batch_size  = 4  # tasks per step
  group_size  = 8  # completions per task: the GRPO group
  seed        = var.seed
  concurrency = 8
}

sandbox "local" {
  backend   = "local"
  timeout   = "5s"
  pool_size = 8 # the run's concurrency (see quickstart.hcl)
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
  learning_rate    = 0.002 # LoRA moves few weights: it takes a larger rate than full fine-tuning
  lr_scheduler_type = "constant"
  warmup_steps     = 3 # ramp the LR over the first updates: Adam's fresh moments make them large
  loss_type        = "dapo"
  micro_batch      = 16
  max_seq_len      = 64
  max_grad_norm    = 1.0
  checkpoint_every = 10

  lora {
    rank           = 16
    alpha          = 32
    target_modules = ["q", "k", "v", "o", "gate", "up", "down"]
  }

  warmup {
    file          = "quickstart/warmup.jsonl"
    steps         = var.warmup_steps
    batch_size    = 16
    learning_rate = 0.003
    lora          = false # a random base cannot learn the format through an adapter: warm up every weight
  }
}

output {
  dir = "runs/${run.name}"
}
