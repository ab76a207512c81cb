# A complete job for the echo-env example plugin. Build the plugin next to
# this file, then run it from the repository root:
#
#   go build -o examples/echo-env/echo-env ./examples/echo-env
#   rlhost run examples/echo-env/echo.hcl --dry-run
#
# The replies come from replay.jsonl beside this file, so no model server is
# needed; each group holds one right and one wrong answer.

variable "plugin" {
  default     = "./echo-env"
  description = "path of the built plugin, relative to this file; build it first with: go build -o examples/echo-env/echo-env ./examples/echo-env"
}

run {
  name        = "echo-demo"
  steps       = 1
  batch_size  = 3 # one task per word
  group_size  = 2
  concurrency = 4
}

sandbox "box" {
  backend = "local"
  timeout = "5s"
}

env "echo" {
  plugin  = var.plugin
  sandbox = sandbox.box
  words   = ["hello", "sandbox", "plugin"]
}

policy "replay" {
  provider = "replay"
  file     = "replay.jsonl"
}

output { dir = "runs/${run.name}" }
