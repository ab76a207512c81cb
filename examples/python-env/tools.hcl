# A multi-turn tool environment written in Python:
#
#   rlhost run examples/python-env/tools.hcl
#
# The shipped script plays two agents per task: one that greps for the
# secret and submits it, one that guesses.

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
