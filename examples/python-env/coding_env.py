"""Single-shot coding tasks as a Python environment.

Tasks are a TASKS dict in the style of TRL's reward-function examples. A
completion's code is extracted, checked for banned patterns, and run in the
episode's sandbox against every test input; the reward is the fraction of
tests whose result equals the reference's, or -1 for a banned pattern, no
code, an exception or a timeout. Same tasks and replay file as the built-in
Go `coding` env (examples/coding.hcl).
"""

import json
import re
import sys
from pathlib import Path

try:
    import rlhost_env as rl
except ImportError:  # running from a checkout without `pip install ./core/sdk/envplugin/python`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "core" / "sdk" / "envplugin" / "python"))
    import rlhost_env as rl

TASKS = {
    "sort_list": {
        "prompt": "Write a Python function `sort_list(xs)` that takes a list of integers and returns a new list "
                  "with the same integers in ascending order.\nDo not use any built-in or library sorting: no "
                  "`sorted(`, no `.sort(`, no `heapq`, no `bisect`.\nAnswer with the function in a ```python code block.",
        "func_name": "sort_list",
        "banned_patterns": ["sorted(", ".sort(", "heapq", "bisect", "numpy", "pandas"],
        "tests": ["[]", "[1]", "[3, 1, 2]", "[5, -2, 5, 0, -7, 3]", "[10, 9, 8, 7, 6, 5, 4, 3, 2, 1]",
                  "[2, 2, 2, 1]", "list(range(50, 0, -3))", "[-1, -100, 42, 7, 7, 0, 13, -5]"],
        "reference": "sorted",
    },
    "max_subarray": {
        "prompt": "Write a Python function `max_subarray(nums)` that takes a non-empty list of integers and returns "
                  "the largest sum of any non-empty contiguous subarray.\nAnswer with the function in a ```python code block.",
        "func_name": "max_subarray",
        "banned_patterns": [],
        "tests": ["[1]", "[-1]", "[-2, 1, -3, 4, -1, 2, 1, -5, 4]", "[5, 4, -1, 7, 8]", "[-3, -2, -5]",
                  "[0, 0, 0]", "[2, -1, 2, -1, 2]", "[1, -2, 3, 10, -4, 7, 2, -5]", "list(range(-5, 6))"],
        "reference": "def max_subarray(nums):\n"
                     "    return max(sum(nums[i:j]) for i in range(len(nums)) for j in range(i + 1, len(nums) + 1))\n",
    },
}

# Runs inside the sandbox: loads the reference and the candidate, calls both
# on every test input, prints one JSON line. Candidate exceptions are caught
# per test; a broken module is reported as such.
RUNNER = r'''
import json, sys
job = json.load(sys.stdin)
def load(src, name):
    if src.isidentifier():
        return eval(src)
    ns = {}
    exec(compile(src, "<%s>" % name, "exec"), ns)
    return ns[job["func_name"]]
ref = load(job["reference"], "reference")
try:
    cand = load(job["code"], "solution")
except BaseException as e:
    print(json.dumps({"error": "%s: %s" % (type(e).__name__, e)})); sys.exit()
passed = 0
for t in job["tests"]:
    try:
        passed += cand(eval(t)) == ref(eval(t))
    except Exception as e:
        print(json.dumps({"error": "test %s: %s: %s" % (t, type(e).__name__, e)})); sys.exit()
print(json.dumps({"passed": passed}))
'''


def extract_code(text):
    """The last ```python block, else an <answer> block, else the text."""
    blocks = re.findall(r"```(?:python|py)?\n(.*?)```", text, re.S)
    if blocks:
        return blocks[-1]
    m = re.search(r"<answer>(.*?)</answer>", text, re.S)
    return m.group(1) if m else text


class CodingEnv(rl.Env):
    name = "py-coding"
    version = "0.1.0"
    description = "single-shot Python coding tasks, scored by tests in the sandbox"
    settings = {
        "timeout": rl.Setting(float, default=5, description="seconds for one scoring run"),
        "tasks": rl.Setting(list[str], default=list(TASKS), description="task ids to pose"),
    }

    def configure(self, settings, config):
        for i, tid in enumerate(settings["tasks"]):
            if tid not in TASKS:
                raise rl.ConfigError("unknown task", f"tasks[{i}] = {tid!r}; known: {', '.join(TASKS)}", ["tasks"])
        if settings["timeout"] <= 0:
            raise rl.ConfigError("invalid timeout", "timeout must be positive", ["timeout"])
        self.cfg = settings

    def tasks(self):
        return [rl.Task(tid, TASKS[tid]["prompt"]) for tid in self.cfg["tasks"]]

    def step(self, ep, reply):
        task = TASKS[ep.task.id]
        code = extract_code(reply.content)
        for p in task["banned_patterns"]:
            if p in code:
                return rl.Observation(done=True, reward=-1, metrics={"banned": 1}, info={"banned_pattern": p})
        if not code.strip():
            return rl.Observation(done=True, reward=-1, metrics={"no_code": 1})
        job = {"code": code, **{k: task[k] for k in ("func_name", "tests", "reference")}}
        res = ep.sandbox.exec(["python3", "-I", "-c", RUNNER], stdin=json.dumps(job), timeout=self.cfg["timeout"])
        if res.timed_out:
            return rl.Observation(done=True, reward=-1, metrics={"timeout": 1}, finish_reason=rl.FINISH_TIMEOUT)
        lines = res.out.strip().splitlines()
        verdict = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {"error": res.err[-2000:]}
        if "error" in verdict:
            return rl.Observation(done=True, reward=-1, metrics={"error": 1}, info={"error": verdict["error"]})
        n = len(task["tests"])
        return rl.Observation(done=True, reward=verdict["passed"] / n,
                              metrics={"tests_passed": verdict["passed"], "tests_total": n},
                              finish_reason=rl.FINISH_PASSED if verdict["passed"] == n else rl.FINISH_DONE)


if __name__ == "__main__":
    rl.serve(CodingEnv())
