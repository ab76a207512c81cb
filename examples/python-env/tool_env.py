"""A small multi-turn tool environment: find a number hidden in the
sandbox's files with a shell tool, then submit it.

new_episode writes a few files into the episode's sandbox, one of which
holds the secret. The policy calls `shell` (run a command in the sandbox) as
often as it likes and `submit` once; reward 1 for the right number, 0
otherwise, minus 0.05 for every shell call after the third.
"""

import random
import sys
from pathlib import Path

try:
    import rlhost_env as rl
except ImportError:  # running from a checkout without `pip install ./core/sdk/envplugin/python`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "core" / "sdk" / "envplugin" / "python"))
    import rlhost_env as rl

TOOLS = [
    rl.Tool("shell", "Run a shell command in your sandbox; returns its output.",
            {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}),
    rl.Tool("submit", "Submit the secret number. Ends the episode.",
            {"type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]}),
]


class SecretEnv(rl.Env):
    name = "py-secret"
    version = "0.1.0"
    description = "find a number hidden in the sandbox's files with a shell tool"
    settings = {
        "tasks": rl.Setting(int, default=3, description="number of tasks"),
        "files": rl.Setting(int, default=4, description="files per sandbox; one holds the secret"),
    }

    def configure(self, settings, config):
        if settings["files"] < 1:
            raise rl.ConfigError("invalid files", "files must be at least 1", ["files"])
        self.cfg = settings

    def tasks(self):
        # Seeded per task, so the secret and its file are the same for a
        # whole group: the GRPO comparison is fair.
        out = []
        for i in range(self.cfg["tasks"]):
            r = random.Random(i)
            out.append(rl.Task(f"secret-{i}", "", {"secret": r.randrange(1000, 9999),
                                                    "file": r.randrange(self.cfg["files"])}))
        return out

    def new_episode(self, ep):
        d = ep.task.data
        for f in range(self.cfg["files"]):
            body = f"the secret is {d['secret']}\n" if f == d["file"] else f"nothing here ({f})\n"
            ep.sandbox.write_file(f"notes/{f}.txt", body)
        ep.state["shell_calls"] = 0
        prompt = "One of the files under notes/ holds a secret number. Find it with the shell tool and submit it."
        return rl.Observation(messages=[rl.user(prompt)], tools=TOOLS)

    def step(self, ep, reply):
        if not reply.tool_calls:
            return rl.Observation(messages=[rl.user("Use the shell or submit tool.")])
        results = []
        for call in reply.tool_calls:
            args = call.args()
            if call.name == "submit":
                calls = ep.state["shell_calls"]
                right = args.get("number") == ep.task.data["secret"]
                reward = (1.0 if right else 0.0) - 0.05 * max(0, calls - 3)
                return rl.Observation(done=True, reward=reward, metrics={"shell_calls": calls},
                                      finish_reason=rl.FINISH_PASSED if right else rl.FINISH_DONE)
            if call.name == "shell":
                ep.state["shell_calls"] += 1
                res = ep.sandbox.exec(args.get("cmd", ""), timeout=5)
                results.append(rl.tool_result(call, (res.out + res.err)[-4000:] + f"\n[exit {res.exit_code}]"))
            else:
                results.append(rl.tool_result(call, f"unknown tool {call.name!r}"))
        return rl.Observation(messages=results)

    def end(self, ep, reason):
        # reason is "" after a submit. Otherwise the host stopped the
        # episode first (rl.FINISH_MAX_TURNS: the run's max_turns replies
        # were used up; or a timeout): no number was submitted, so the
        # reward stays 0, but the metric every episode reports is kept.
        if reason:
            return rl.Observation(reward=0.0, metrics={"shell_calls": ep.state.get("shell_calls", 0)})
        return None


if __name__ == "__main__":
    rl.serve(SecretEnv())
