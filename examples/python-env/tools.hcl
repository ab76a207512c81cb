# A multi-turn tool environment written in Python:
#
#   rlhost run examples/python-env/tools.hcl
#   rlhost run examples/python-env/tools.hcl --var python=/usr/bin/python3
#
# The shipped script plays two agents per task: one that greps for the
# secret and submits it, one that guesses.

variable "python" {
  default     = "python3"
  description = "the interpreter that runs the env script; it needs grpcio and protobuf (Debian: /usr/bin/python3 with python3-grpcio and python3-protobuf)"
}

run {
  name       = "py-tools-demo"
  batch_size = 3
  group_size = 2
  max_turns  = 6
}

sandbox "local" {
  backend = "local"
  timeout = "5s"
}

env "secret" {
  plugin = "./tool_env.py"
  python = var.python
  tasks  = 3
  files  = 4
}

policy "replay" {
  provider = "replay"
  file     = "tool_replay.jsonl"
}

output {
  dir = "runs/${run.name}"
}
