"""A harness for testing an Env the way rlhost runs it, without writing HCL.

    from rlhost_env.testing import Harness

    def test_sort_list():
        h = Harness(CodingEnv, settings={"timeout": 2})
        res = h.run({"sort_list": ["```python\\ndef sort_list(xs): ...```"]})
        assert res["sort_list"][0].reward == 1

run() writes a job file and a replay script into a temporary directory and
runs the real `rlhost run` on it: the env's module is started as a plugin
process, its settings are decoded against its schema, and every episode gets
a real sandbox from the local backend, lent over the host's socket. The scripted
policy gives, per task id, a list of episodes; an episode is one reply (a
string) or a list of turns, each a string or an assistant message dict such
as {"content": "", "tool_calls": [{"id": "c1", "type": "function",
"function": {"name": "shell", "arguments": "{\\"cmd\\": \\"ls\\"}"}}]}.

rlhost is found in $RLHOST_BIN, else on PATH.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Type, Union

from .env import Config, Env
from .types import Block, ConfigError, Setting

Turn = Union[str, Dict[str, Any]]
Script = Dict[str, Sequence[Union[str, Sequence[Turn]]]]


@dataclass
class Result:
    """One finished episode, read back from rlhost's trajectories.jsonl."""

    task_id: str
    index: int
    reward: float
    finish_reason: str
    error: str
    messages: List[Dict[str, Any]]
    metrics: Dict[str, float] = field(default_factory=dict)
    info: Dict[str, str] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict)


class HarnessError(Exception):
    """rlhost could not run the job (bad settings, plugin failed to start)."""


def hcl_value(v: Any) -> str:
    """Encodes a JSON-like value as an HCL expression."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    if isinstance(v, str):
        # JSON string escapes are valid HCL; HCL also reads ${ and %{ as
        # template syntax, which a literal must escape by doubling.
        return json.dumps(v).replace("${", "$${").replace("%{", "%%{")
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(hcl_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {hcl_value(x)}" for k, x in v.items()) + "}"
    if v is None:
        return "null"
    raise TypeError(f"cannot write {type(v).__name__} as HCL")


def _body(settings: Dict[str, Any], spec: Dict[str, Union[Setting, Block]], indent: str) -> str:
    lines = []
    for name, value in settings.items():
        s = spec.get(name)
        if isinstance(s, Block):
            for item in (value if s.list else [value]):
                lines.append(f"{indent}{name} {{\n{_body(item, s.settings, indent + '  ')}{indent}}}\n")
        else:
            lines.append(f"{indent}{name} = {hcl_value(value)}\n")
    return "".join(lines)


def _defaults(spec: Dict[str, Union[Setting, Block]], given: Dict[str, Any]) -> Dict[str, Any]:
    out = {n: s.default for n, s in spec.items() if isinstance(s, Setting)}
    out.update({n: (None if not s.list else []) for n, s in spec.items() if isinstance(s, Block)})
    out.update(given)
    return out


class Harness:
    """Runs env_class (defined in an importable .py file that calls
    rlhost_env.serve under ``if __name__ == "__main__"``) through rlhost."""

    def __init__(self, env_class: Type[Env], settings: Optional[Dict[str, Any]] = None, *,
                 exec_timeout: str = "30s", episode_timeout: str = "5m", concurrency: int = 4,
                 sandbox: Optional[Dict[str, Any]] = None, rlhost: Optional[str] = None,
                 python: Optional[str] = None, keep_dir: bool = False):
        self.env_class = env_class
        self.settings = dict(settings or {})
        self.script_path = os.path.abspath(inspect.getfile(env_class))
        self.exec_timeout = exec_timeout
        self.episode_timeout = episode_timeout
        self.concurrency = concurrency
        self.sandbox = dict(sandbox or {})
        self.python = python or sys.executable
        self.keep_dir = keep_dir
        self.rlhost = rlhost or os.environ.get("RLHOST_BIN") or shutil.which("rlhost")
        if not self.rlhost:
            raise HarnessError("rlhost not found: put it on PATH or set RLHOST_BIN")
        self.stderr = ""  # rlhost's log of the last run

    def task_ids(self) -> List[str]:
        """The env's task ids, from an instance configured in this process
        with the given settings and the schema's defaults."""
        env = self.env_class()
        spec = type(env).settings
        diags = env.configure(_defaults(spec, self.settings), Config(name="env", base_dir=os.getcwd(), run_id="harness"))
        errors = [d for d in diags or [] if not d.warning]
        if errors:
            raise ConfigError(errors[0].summary, errors[0].detail, errors[0].path)
        return [t.id for t in env.tasks()]

    def job(self, n_tasks: int, group: int, turns: int) -> str:
        """The job file run() writes."""
        spec = self.env_class.settings
        sandbox = "".join(f"  {k} = {hcl_value(v)}\n" for k, v in self.sandbox.items())
        return (
            "run {\n  name = \"harness\"\n  steps = 1\n"
            f"  batch_size = {n_tasks}\n  group_size = {group}\n  max_turns = {turns}\n"
            f"  concurrency = {self.concurrency}\n  episode_timeout = {hcl_value(self.episode_timeout)}\n}}\n"
            f"sandbox \"box\" {{\n  backend = \"local\"\n  timeout = {hcl_value(self.exec_timeout)}\n{sandbox}}}\n"
            f"env \"env\" {{\n  plugin = {hcl_value(self.script_path)}\n  python = {hcl_value(self.python)}\n"
            f"  pass_env = [\"PYTHONPATH\"]\n{_body(self.settings, spec, '  ')}}}\n"
            "policy \"script\" {\n  provider = \"replay\"\n  file = \"script.jsonl\"\n}\n"
        )

    def run(self, script: Script) -> Dict[str, List[Result]]:
        """Runs one episode per scripted episode and returns the results by
        task id, in script order. Tasks the script does not mention are not
        run (their episodes fail in rlhost and are left out here)."""
        episodes: Dict[str, List[List[Turn]]] = {
            tid: [[e] if isinstance(e, (str, dict)) else list(e) for e in eps] for tid, eps in script.items()
        }
        if not episodes or any(not eps for eps in episodes.values()):
            raise ValueError("script: give at least one episode for each task")
        ids = self.task_ids()
        unknown = sorted(set(episodes) - set(ids))
        if unknown:
            raise ValueError(f"script names tasks the env does not have: {unknown}; it has {ids}")
        group = max(len(eps) for eps in episodes.values())
        turns = max(len(e) for eps in episodes.values() for e in eps)
        work = tempfile.mkdtemp(prefix="rlhost-harness-")
        try:
            with open(os.path.join(work, "job.hcl"), "w") as f:
                f.write(self.job(len(ids), group, turns))
            with open(os.path.join(work, "script.jsonl"), "w") as f:
                for tid, eps in episodes.items():
                    f.write(json.dumps({"task_id": tid, "episodes": eps}) + "\n")
            # The plugin is started with a filtered environment; PYTHONPATH is
            # passed so it imports the same rlhost_env as this process.
            env = dict(os.environ)
            pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
            proc = subprocess.run([self.rlhost, "run", "job.hcl", "--out", "out"], cwd=work, env=env,
                                  capture_output=True, text=True)
            self.stderr = proc.stderr
            path = os.path.join(work, "out", "trajectories.jsonl")
            if not os.path.exists(path):
                raise HarnessError(f"rlhost run failed (exit {proc.returncode}):\n{proc.stderr}")
            out: Dict[str, List[Result]] = {tid: [] for tid in episodes}
            with open(path) as f:
                for line in f:
                    t = json.loads(line)
                    tid = t.get("task_id", "")
                    if tid not in episodes or t.get("index", 0) >= len(episodes[tid]):
                        continue
                    out[tid].append(Result(
                        task_id=tid, index=t.get("index", 0), reward=t.get("reward", 0.0),
                        finish_reason=t.get("finish_reason", ""), error=t.get("error", ""),
                        messages=t.get("messages", []), metrics=t.get("metrics", {}), info=t.get("info", {}), raw=t,
                    ))
            for rs in out.values():
                rs.sort(key=lambda r: r.index)
            return out
        finally:
            if not self.keep_dir:
                shutil.rmtree(work, ignore_errors=True)
