"""Tests of the example envs through the real rlhost, with rlhost_env's
harness: real plugin processes, real local sandboxes, scripted policies.

    RLHOST_BIN=bin/rlhost python3 -m unittest discover -s examples/python-env
"""

import json
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coding_env import CodingEnv  # noqa: E402 - also puts rlhost_env on the path in a checkout
import rlhost_env as rl  # noqa: E402
from echo_env import EchoEnv  # noqa: E402
from rlhost_env.testing import Harness  # noqa: E402
from tool_env import SecretEnv  # noqa: E402

SORT_OK = "```python\ndef sort_list(xs):\n    out = []\n    for x in xs:\n        i = len(out)\n" \
          "        while i > 0 and out[i - 1] > x:\n            i -= 1\n        out.insert(i, x)\n    return out\n```"


class CodingEnvTest(unittest.TestCase):
    def test_rewards(self):
        h = Harness(CodingEnv, {"timeout": 2, "tasks": ["sort_list"]})
        res = h.run({"sort_list": [
            SORT_OK,
            "```python\ndef sort_list(xs):\n    return sorted(xs)\n```",  # banned pattern
            "```python\ndef sort_list(xs):\n    return xs\n```",  # passes 2 of 8 tests
            "```python\ndef sort_list(xs):\n    while True:\n        pass\n```",  # timeout
            "no code here (",  # the whole text is tried as code: a syntax error
        ]})["sort_list"]
        self.assertEqual([r.reward for r in res], [1.0, -1.0, 0.25, -1.0, -1.0], h.stderr)
        self.assertEqual(res[1].metrics.get("banned"), 1)
        self.assertEqual(res[3].finish_reason, "timeout")
        self.assertIn("SyntaxError", res[4].info.get("error", ""))

    def test_unknown_task_rejected(self):
        h = Harness(CodingEnv, {"tasks": ["nope"]})
        with self.assertRaisesRegex(rl.ConfigError, "unknown task"):
            h.run({"sort_list": [SORT_OK]})


class EchoEnvTest(unittest.TestCase):
    def test_settings_reach_the_env_verbatim(self):
        # HCL reads ${ and %{ as templates; the harness must write them as
        # literals, and quotes and backslashes must survive too.
        word = 'x${y}%{z}"q\\'
        h = Harness(EchoEnv, {"words": [word, "plain"]})
        res = h.run({"echo-0": [word, "nope"], "echo-1": ["plain"]})
        self.assertEqual([r.reward for r in res["echo-0"]], [1.0, 0.0], h.stderr)
        self.assertEqual(res["echo-1"][0].reward, 1.0)
        self.assertIn(word, res["echo-0"][0].messages[0]["content"])


def call(name, **args):
    return {"content": "", "tool_calls": [{"id": "c1", "type": "function",
                                           "function": {"name": name, "arguments": json.dumps(args)}}]}


class SecretEnvTest(unittest.TestCase):
    def test_multi_turn_tools(self):
        h = Harness(SecretEnv, {"tasks": 1, "files": 3})
        env = SecretEnv()
        env.configure({"tasks": 1, "files": 3}, None)
        number = env.tasks()[0].data["secret"]
        res = h.run({"secret-0": [
            [call("shell", cmd="grep -rh secret notes/"), call("submit", number=number)],
            [call("submit", number=number + 1)],
            [call("shell", cmd="true")] * 5 + [call("submit", number=number)],
        ]})["secret-0"]
        self.assertEqual([r.error for r in res], ["", "", ""], h.stderr)
        self.assertEqual(res[0].reward, 1.0)
        self.assertIn(f"the secret is {number}", res[0].messages[2]["content"])
        self.assertEqual(res[1].reward, 0.0)
        self.assertAlmostEqual(res[2].reward, 0.9)

    def test_cut_off_by_max_turns(self):
        # Two shell calls and no submit: the run's max_turns (two, the
        # longest scripted episode) ends it; end() keeps its metric.
        h = Harness(SecretEnv, {"tasks": 1, "files": 3})
        res = h.run({"secret-0": [[call("shell", cmd="ls notes"), call("shell", cmd="true")]]})["secret-0"]
        self.assertEqual(res[0].error, "", h.stderr)
        self.assertEqual(res[0].finish_reason, "max_turns")
        self.assertEqual(res[0].reward, 0.0)
        self.assertEqual(res[0].metrics.get("shell_calls"), 2, res[0].metrics)


if __name__ == "__main__":
    unittest.main()
