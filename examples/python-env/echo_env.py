"""The echo env of examples/echo-env, in Python: ask the policy to repeat a
word, write the reply into the lent sandbox and read it back with cat;
reward 1 when it matches."""

import sys
from pathlib import Path

try:
    import rlhost_env as rl
except ImportError:  # running from a checkout without `pip install ./core/sdk/envplugin/python`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "core" / "sdk" / "envplugin" / "python"))
    import rlhost_env as rl


class EchoEnv(rl.Env):
    name = "py-echo"
    version = "0.1.0"
    description = "repeat a word; scored with cat in the sandbox"
    settings = {
        "words": rl.Setting(list[str], default=["hello", "sandbox", "plugin"], description="one task per word"),
        "path": rl.Setting(str, default="/usr/local/bin:/usr/bin:/bin", description="PATH in the sandbox"),
    }

    def configure(self, settings, config):
        if not settings["words"]:
            raise rl.ConfigError("no words", "give at least one word", ["words"])
        for i, w in enumerate(settings["words"]):
            if not w or any(c.isspace() for c in w):
                raise rl.ConfigError("invalid word", f"words[{i}] = {w!r}: want one word without spaces", ["words"])
        self.cfg = settings

    def tasks(self):
        return [rl.Task(f"echo-{i}", f"Reply with exactly this word and nothing else: {w}", {"word": w})
                for i, w in enumerate(self.cfg["words"])]

    def step(self, ep, reply):
        ep.sandbox.write_file("reply.txt", reply.content)
        res = ep.sandbox.exec(["cat", "reply.txt"], env={"PATH": self.cfg["path"]})
        if res.exit_code != 0:
            raise RuntimeError(f"cat reply: exit {res.exit_code}: {res.err}")
        match = res.out.strip() == ep.task.data["word"]
        return rl.Observation(done=True, reward=1.0 if match else 0.0, metrics={"match": float(match)},
                              finish_reason=rl.FINISH_PASSED if match else rl.FINISH_DONE)


if __name__ == "__main__":
    rl.serve(EchoEnv())
