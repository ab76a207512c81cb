# Single-shot coding tasks, scored by a Python environment plugin:
#
#   rlhost run examples/python-env/coding.hcl
#   rlhost run examples/python-env/coding.hcl --var python=/usr/bin/python3
#
# Same tasks and shipped completions as examples/coding.hcl, whose env is the
# built-in Go one.

variable "python" {
  default     = "python3"
  description = "the interpreter that runs the env script; it needs grpcio and protobuf (Debian: /usr/bin/python3 with python3-grpcio and python3-protobuf)"
}

run {
  name        = "py-coding-demo"
  steps       = 2
  batch_size  = 2
  group_size  = 7
  concurrency = 8
}

sandbox "local" {
  backend = "local"
  timeout = "5s"
}

env "coding" {
  plugin  = "./coding_env.py"
  python  = var.python
  sandbox = sandbox.local
  timeout = 2 # seconds per scoring run (the env's own setting)
}

policy "replay" {
  provider = "replay"
  file     = "../coding/completions.jsonl"
}

output {
  dir = "runs/${run.name}"
}
