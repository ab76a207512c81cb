"""A Python env for rlhost's end-to-end tests. The policy's reply picks what
the env does in step:

  ok     exec `cat` on the file new_episode wrote; reward 1 if it matches
  RAISE  raise an exception (that episode errors, the plugin lives on)
  EXIT   call sys.exit (the same)
  CRASH  kill the plugin process
  SLEEP  run a long sleep in the sandbox
  BIG    move `big_mib` MiB through the broker both ways, check them
  exec   run `true` and keep the episode open (for benchmarks)
  noop   nothing (the episode may have no sandbox)

Observations say in info["wire"] which wire served the step: "frames" (the
episode socket) or "grpc".
"""

import hashlib
import os
import sys
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[5] / "core" / "sdk" / "envplugin" / "python"))
import rlhost_env as rl  # noqa: E402
from rlhost_env import sandbox as _sandbox  # noqa: E402


def wire():
    """The wire of the host's call running on this thread."""
    ctx = getattr(_sandbox._call, "context", None)
    return "grpc" if isinstance(ctx, grpc.ServicerContext) else "frames"


class ProbeEnv(rl.Env):
    name = "pyprobe"
    version = "0.0.1"
    settings = {
        "n": rl.Setting(int, default=4, description="number of tasks"),
        "greeting": rl.Setting(str, required=True),
        "big_mib": rl.Setting(int, default=1),
        "started_dir": rl.Setting(str, default="", description="SLEEP touches a file here first"),
    }

    def configure(self, settings, config):
        if settings["greeting"] == "bad":
            return [rl.Diagnostic("greeting rejected", "the probe rejects 'bad'", ["greeting"])]
        if settings["n"] < 1:
            raise rl.ConfigError("too few tasks", "n must be at least 1", ["n"])
        self.s = settings

    def tasks(self):
        return [rl.Task(f"t{i}", f"task {i}", {"i": i}) for i in range(self.s["n"])]

    def new_episode(self, ep):
        if ep.sandbox is not None:
            ep.sandbox.write_file("task.txt", f"{self.s['greeting']} {ep.task.data['i']}\n")
        return rl.Observation(messages=[rl.user(ep.task.prompt)])

    def step(self, ep, reply):
        cmd = reply.content.strip()
        if cmd == "RAISE":
            raise RuntimeError(f"boom in step of {ep.task.id}")
        if cmd == "EXIT":
            sys.exit(3)
        if cmd == "CRASH":
            os._exit(7)
        if cmd == "SLEEP":
            if self.s["started_dir"]:
                Path(self.s["started_dir"], ep.id.replace("/", "_")).touch()
            ep.sandbox.exec(["sleep", "300"], timeout=300)
        if cmd == "noop":
            return rl.Observation(info={"wire": wire()})
        if cmd == "BIG":
            return self.big(ep)
        if cmd == "exec":  # keeps the episode open, so a benchmark can step it repeatedly
            return rl.Observation(metrics={"exit": ep.sandbox.exec(["true"]).exit_code})
        res = ep.sandbox.exec(["cat", "task.txt"])
        want = f"{self.s['greeting']} {ep.task.data['i']}\n"
        return rl.Observation(done=True, reward=1.0 if res.ok and res.out == want else 0.0,
                              info={"sandbox": ep.sandbox.id, "wire": wire()})

    def big(self, ep):
        data = os.urandom(self.s["big_mib"] << 20)
        ep.sandbox.write_file("big.bin", data)
        back = ep.sandbox.read_file("big.bin")
        digest = ep.sandbox.exec(["sha256sum", "big.bin"]).out.split()[0]
        out = ep.sandbox.exec(["head", "-c", str(len(data)), "big.bin"], max_output=len(data) + 1)
        size = {f.path.rsplit("/", 1)[-1]: f.size for f in ep.sandbox.list(".")}.get("big.bin")
        ok = back == data and out.stdout == data and digest == hashlib.sha256(data).hexdigest() and size == len(data)
        return rl.Observation(done=True, reward=1.0 if ok else 0.0, metrics={"bytes": len(data)})


if __name__ == "__main__":
    rl.serve(ProbeEnv())
