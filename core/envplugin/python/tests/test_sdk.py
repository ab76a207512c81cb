"""Unit tests of rlhost_env's pieces that need no host: type conversions,
the schema, HCL literals and the broker's bookkeeping. The protocol as a
whole is tested through the real rlhost (host/cmd/rlhost/python_e2e_test.go).

    python3 -m unittest discover -s core/envplugin/python/tests
"""

import io
import json
import logging
import sys
import threading
import time
import unittest
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import rlhost_env as rl  # noqa: E402
from rlhost_env import goplugin  # noqa: E402
from rlhost_env import server as server_mod  # noqa: E402
from rlhost_env._pb import goplugin_pb2 as gp  # noqa: E402
from rlhost_env._pb import rlhost_pb2 as pb  # noqa: E402
from rlhost_env.testing import hcl_value  # noqa: E402
from rlhost_env.types import as_observation, cty_type, schema_json  # noqa: E402


class DescribeTest(unittest.TestCase):
    def test_no_sandbox_is_declared(self):
        from rlhost_env.server import EnvServicer

        class Judge(rl.Env):
            name = "judge"
            no_sandbox = True

        class Coder(rl.Env):
            name = "coder"

        self.assertTrue(EnvServicer(Judge(), None).describe(None, None).no_sandbox)
        self.assertFalse(EnvServicer(Coder(), None).describe(None, None).no_sandbox)


class TypesTest(unittest.TestCase):
    def test_cty_types(self):
        cases = [(str, "string"), (int, "number"), (float, "number"), (bool, "bool"),
                 (list[str], ["list", "string"]), (List[int], ["list", "number"]),
                 (dict[str, float], ["map", "number"]), (Dict[str, list[str]], ["map", ["list", "string"]]),
                 ("string", "string"), (["set", "string"], ["set", "string"])]
        for t, want in cases:
            self.assertEqual(cty_type(t), want, t)
        for bad in (bytes, dict[int, str], tuple):
            with self.assertRaises(TypeError):
                cty_type(bad)

    def test_schema_json(self):
        spec = schema_json({
            "n": rl.Setting(int, default=3, description="count"),
            "key": rl.Setting(str, required=True, sensitive=True),
            "limit": rl.Block({"size": rl.Setting(int)}, list=True),
        })
        self.assertEqual(spec, {
            "attributes": [{"name": "n", "type": "number", "default": 3, "description": "count"},
                           {"name": "key", "type": "string", "required": True, "sensitive": True}],
            "blocks": [{"name": "limit", "nesting": "list",
                        "spec": {"attributes": [{"name": "size", "type": "number"}]}}],
        })

    def test_observation_round_trip(self):
        call = rl.ToolCall("c1", "shell", '{"cmd": "ls"}')
        obs = rl.Observation(messages=[rl.Message("assistant", "", tool_calls=[call]), rl.tool_result(call, "out")],
                             tools=[rl.Tool("shell", "run", {"type": "object"})], done=True, reward=0.5,
                             metrics={"k": 1}, info={"why": 2}, finish_reason=rl.FINISH_PASSED)
        p = pb.Observation.FromString(obs.to_pb().SerializeToString())
        self.assertEqual(p.messages[0].tool_calls[0].function.name, "shell")
        self.assertEqual(rl.Message.from_pb(p.messages[0]).tool_calls[0].args(), {"cmd": "ls"})
        self.assertEqual((p.messages[1].role, p.messages[1].tool_call_id), ("tool", "c1"))
        self.assertEqual(json.loads(p.tools[0].parameters_json), {"type": "object"})
        self.assertEqual((p.done, p.reward, dict(p.metrics), dict(p.info)), (True, 0.5, {"k": 1.0}, {"why": "2"}))

    def test_as_observation(self):
        self.assertEqual(as_observation("hi").messages, [rl.user("hi")])
        self.assertEqual(as_observation(None), rl.Observation())
        with self.assertRaises(TypeError):
            as_observation(3)

    def test_task_data_round_trip(self):
        t = rl.Task.from_pb(rl.Task("t", "p", {"a": [1, 2]}).to_pb())
        self.assertEqual((t.id, t.prompt, t.data), ("t", "p", {"a": [1, 2]}))
        self.assertIsNone(rl.Task.from_pb(rl.Task("t").to_pb()).data)


class HCLValueTest(unittest.TestCase):
    def test_literals(self):
        cases = [(True, "true"), (3, "3"), (1.5, "1.5"), ("a", '"a"'), ("${x}", '"$${x}"'), ("%{if}", '"%%{if}"'),
                 ('q"\\\n', '"q\\"\\\\\\n"'), ([1, "b"], '[1, "b"]'), ({"k": [True]}, '{"k" = [true]}'), (None, "null")]
        for v, want in cases:
            self.assertEqual(hcl_value(v), want, v)


class BrokerTest(unittest.TestCase):
    def test_dial_waits_for_the_announcement(self):
        b = goplugin.Broker()
        got = {}

        def dial():
            got["ch"] = b.dial(7, timeout=10)

        th = threading.Thread(target=dial)
        th.start()
        time.sleep(0.05)
        knock = gp.ConnInfo(service_id=9, knock=gp.ConnInfo.Knock(knock=True))
        b.start_stream(iter([knock, gp.ConnInfo(service_id=7, network="unix", address="/nonexistent")]), None)
        th.join(10)
        self.assertIn("ch", got)
        got["ch"].close()
        with self.assertRaises(TimeoutError):  # a knock is not an announcement
            b.dial(9, timeout=0.05)

    def test_dial_unannounced_times_out(self):
        with self.assertRaises(TimeoutError):
            goplugin.Broker().dial(1, timeout=0.05)

    def test_close_wakes_dialers(self):
        b = goplugin.Broker()
        threading.Timer(0.05, b.close).start()
        with self.assertRaises(goplugin.PluginError):
            b.dial(1, timeout=10)


class _FakeBroker:
    """Counts dials; fails the ids listed in fail once each."""

    def __init__(self, fail=()):
        self.dials: List[int] = []
        self.fail = set(fail)
        self.mu = threading.Lock()

    def dial(self, service_id: int):
        with self.mu:
            self.dials.append(service_id)
            if service_id in self.fail:
                self.fail.discard(service_id)
                raise TimeoutError(f"no announcement for {service_id}")
        time.sleep(0.01)  # widens the window a racing second dial would need
        return _FakeChannel()


class _FakeChannel:
    closed = False

    def close(self):
        self.closed = True


class ChannelsTest(unittest.TestCase):
    """The plugin dials the host's sandbox server once per broker id: a
    second dial of an id would wait for an announcement that never comes."""

    def test_one_dial_per_broker_id(self):
        cases = [
            # (name, ids asked in order, ids failing once, dials wanted)
            ("same id reuses the channel", [5, 5, 5], [], [5]),
            ("each id dialled once", [5, 6, 5, 6], [], [5, 6]),
            ("a failed dial is retried", [5, 5, 5], [5], [5, 5]),
        ]
        for name, ids, fail, want in cases:
            with self.subTest(name):
                b = _FakeBroker(fail)
                chans = server_mod._Channels(b)
                got = {}
                for i in ids:
                    try:
                        ch = chans.get(i)
                    except TimeoutError:
                        continue
                    self.assertIs(got.setdefault(i, ch), ch, f"id {i} got a second channel")
                self.assertEqual(b.dials, want)

    def test_concurrent_episodes_dial_once(self):
        b = _FakeBroker()
        chans = server_mod._Channels(b)
        got: List[object] = []
        ths = [threading.Thread(target=lambda: got.append(chans.get(3))) for _ in range(8)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(10)
        self.assertEqual(b.dials, [3])
        self.assertEqual(len(got), 8)
        self.assertTrue(all(ch is got[0] for ch in got))

    def test_close_closes_and_forgets(self):
        b = _FakeBroker()
        chans = server_mod._Channels(b)
        first = chans.get(4)
        chans.close()
        self.assertTrue(first.closed)
        self.assertIsNot(chans.get(4), first)
        self.assertEqual(b.dials, [4, 4])

    def test_requests_name_the_sandbox(self):
        sent = []

        class Recorder:
            def unary_unary(self, _method, request_serializer, response_deserializer):
                def call(req, timeout=None):
                    sent.append(req)
                    return response_deserializer(b"")
                return call

        sb = rl.Sandbox(Recorder(), "sb-9")
        sb.exec(["true"])
        sb.read_file("a")
        sb.write_file("a", b"x")
        sb.list(".")
        self.assertEqual([type(r).__name__ for r in sent],
                         ["ExecRequest", "ReadFileRequest", "WriteFileRequest", "ListFilesRequest"])
        self.assertEqual([r.sandbox_id for r in sent], ["sb-9"] * 4)


class LogTest(unittest.TestCase):
    def test_hclog_json(self):
        out = io.StringIO()
        h = goplugin.HCLogHandler(out)
        log = logging.getLogger("rlhost_env.test")
        log.addHandler(h)
        log.propagate = False
        try:
            raise ValueError("x")
        except ValueError:
            log.exception("failed %s", "here")
        log.warning("w")
        lines = [json.loads(x) for x in out.getvalue().splitlines()]
        self.assertEqual((lines[0]["@level"], lines[0]["@message"]), ("error", "failed here"))
        self.assertIn("ValueError: x", lines[0]["error"])
        self.assertEqual(lines[1]["@level"], "warn")
        # go-plugin parses @timestamp with "2006-01-02T15:04:05.000000Z07:00".
        self.assertRegex(lines[1]["@timestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}([+-]\d\d:\d\d|Z)$")


if __name__ == "__main__":
    unittest.main()
