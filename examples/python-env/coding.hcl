# The seed coding tasks, scored by a Python environment plugin:
#
#   rlhost run examples/python-env/coding.hcl
#
# Same tasks and shipped completions as examples/coding.hcl, whose env is the
# built-in Go one.

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
  plugin  = "./coding_env.py" # run with python3; set python = "/path/to/python" to choose
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
