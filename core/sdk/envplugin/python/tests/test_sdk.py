"""Unit tests of rlhost_env's pieces that need no host: type conversions,
the schema, HCL literals, the broker's and the lent-sandbox connection's
bookkeeping, the episode socket (against the gRPC servicer it stands in
for). The protocol as a whole is tested through the real rlhost
(host/cmd/rlhost/python_e2e_test.go).

    python3 -m unittest discover -s core/sdk/envplugin/python/tests
"""

import io
import json
import logging
import os
import stat
import tempfile
import socket
import struct
import sys
import threading
import time
import unittest
import unittest.mock
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import rlhost_env as rl  # noqa: E402
from rlhost_env import goplugin  # noqa: E402
from rlhost_env import episodes  # noqa: E402
from rlhost_env import lendwire  # noqa: E402
from rlhost_env import sandbox as sandbox_mod  # noqa: E402
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

        for env, want in ((Judge(), True), (Coder(), False)):
            s = EnvServicer(env)
            self.addCleanup(s.episodes.close)
            self.assertEqual(s.describe(None, None).no_sandbox, want)

    def test_lent_tokens_are_declared(self):
        # The host lends a backend's sandbox on the backend's socket only to
        # a plugin that declares it carries the token.
        from rlhost_env.server import EnvServicer

        class Coder(rl.Env):
            name = "coder"

        s = EnvServicer(Coder())
        self.addCleanup(s.episodes.close)
        self.assertTrue(s.describe(None, None).lent_tokens)


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


class _FakeConn:
    broken = False
    closed = False

    def close(self):
        self.closed = self.broken = True


class ConnectionsTest(unittest.TestCase):
    """The plugin connects to each lent-sandbox socket once and keeps
    the connection for every episode lent on it."""

    def _connections(self, fail=()):
        connects: List[str] = []
        fail = set(fail)
        mu = threading.Lock()

        def connect(path):
            with mu:
                connects.append(path)
                if path in fail:
                    fail.discard(path)
                    raise FileNotFoundError(path)
            time.sleep(0.01)  # widens the window a racing second connect would need
            return _FakeConn()
        return server_mod._Connections(connect), connects

    def test_one_connection_per_socket(self):
        cases = [
            # (name, sockets asked in order, sockets failing once, one broken after the n-th get, connects wanted)
            ("same socket reuses the connection", ["a", "a", "a"], [], 0, ["a"]),
            ("each socket connected once", ["a", "b", "a", "b"], [], 0, ["a", "b"]),
            ("a failed connect is retried", ["a", "a", "a"], ["a"], 0, ["a", "a"]),
            ("a broken connection is replaced", ["a", "a", "a"], [], 2, ["a", "a"]),
        ]
        for name, socks, fail, break_at, want in cases:
            with self.subTest(name):
                conns, connects = self._connections(fail)
                got = {}
                for i, path in enumerate(socks, 1):
                    try:
                        c = conns.get(path)
                    except FileNotFoundError:
                        continue
                    if not got.get(path, c).broken:
                        self.assertIs(got.setdefault(path, c), c, f"{path} got a second connection")
                    got[path] = c
                    if i == break_at:
                        c.close()
                self.assertEqual(connects, want)

    def test_concurrent_episodes_connect_once(self):
        conns, connects = self._connections()
        got: List[object] = []
        ths = [threading.Thread(target=lambda: got.append(conns.get("s"))) for _ in range(8)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(10)
        self.assertEqual(connects, ["s"])
        self.assertEqual(len(got), 8)
        self.assertTrue(all(c is got[0] for c in got))

    def test_close_closes_and_forgets(self):
        conns, connects = self._connections()
        first = conns.get("s")
        conns.close()
        self.assertTrue(first.closed)
        self.assertIsNot(conns.get("s"), first)
        self.assertEqual(connects, ["s", "s"])


class _FakeHost:
    """The host's end of one lent-sandbox connection: answers each call with
    answer(call), a LentReply, or not at all when answer returns None."""

    def __init__(self, answer):
        self.answer = answer
        self.calls: List[pb.LentCall] = []
        self.got = threading.Condition()
        plugin_end, self.sock = socket.socketpair()
        self.conn = lendwire.Connection("unused", connect=lambda _path: plugin_end)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        try:
            while True:
                call = pb.LentCall()
                lendwire.read_frame(lambda n: lendwire.recv_exact(self.sock, n), call)
                with self.got:
                    self.calls.append(call)
                    self.got.notify_all()
                rep = self.answer(call)
                if rep is not None:
                    rep.id = call.id
                    self.sock.sendall(lendwire.encode_frame(rep))
        except (EOFError, OSError):
            pass

    def wait_calls(self, n):
        with self.got:
            self.got.wait_for(lambda: len(self.calls) >= n, 10)
        return self.calls[:n]

    def close(self):
        # shutdown first: a bare close does not wake the reader blocked on it.
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _error(code: int, message: str) -> pb.LentReply:
    return pb.LentReply(error=pb.LentError(code=code, message=message))


class LendwireTest(unittest.TestCase):
    """The framed calls on a lent-sandbox socket (the host's, or a backend's)."""

    def test_requests_name_the_sandbox(self):
        replies = {"exec": pb.LentReply(exec=pb.ExecResult(exit_code=3, stdout=b"out")),
                   "read_file": pb.LentReply(read_file=pb.ReadFileResponse(data=b"x")),
                   "write_file": pb.LentReply(write_file=pb.Empty()),
                   "list_files": pb.LentReply(list_files=pb.ListFilesResponse())}
        host = _FakeHost(lambda c: replies[c.WhichOneof("call")])
        self.addCleanup(host.close)
        sb = rl.Sandbox(host.conn, "sb-9", b"tok-9")
        self.assertEqual(sb.exec(["true"]).exit_code, 3)
        self.assertEqual(sb.read_file("a"), b"x")
        sb.write_file("a", b"x")
        self.assertEqual(sb.list("."), [])
        calls = host.wait_calls(4)
        self.assertEqual([c.WhichOneof("call") for c in calls], ["exec", "read_file", "write_file", "list_files"])
        self.assertEqual([getattr(c, c.WhichOneof("call")).sandbox_id for c in calls], ["sb-9"] * 4)
        # The episode's token rides on every call: a backend's socket needs it.
        self.assertEqual([c.token for c in calls], [b"tok-9"] * 4)
        self.assertEqual(len({c.id for c in calls}), 4, "call ids repeat")

    def test_errors_keep_their_code(self):
        cases = [(5, "NOT_FOUND"), (7, "PERMISSION_DENIED"), (11, "OUT_OF_RANGE"), (8, "RESOURCE_EXHAUSTED"),
                 (1, "CANCELLED"), (4, "DEADLINE_EXCEEDED"), (2, "UNKNOWN"), (999, "UNKNOWN")]
        host = _FakeHost(lambda c: _error(int(c.read_file.path), f"failed {int(c.read_file.path)}"))
        self.addCleanup(host.close)
        sb = rl.Sandbox(host.conn, "sb")
        for code, name in cases:
            with self.subTest(name):
                with self.assertRaises(rl.SandboxError) as cm:
                    sb.read_file(str(code))
                self.assertEqual(cm.exception.code, name)
                self.assertIn(f"failed {code}", str(cm.exception))

    def test_replies_are_matched_by_id(self):
        held = []

        def answer(c):
            if c.read_file.path == b"slow":
                held.append(c)
                return None
            return pb.LentReply(read_file=pb.ReadFileResponse(data=c.read_file.path))
        host = _FakeHost(answer)
        self.addCleanup(host.close)
        sb = rl.Sandbox(host.conn, "sb")
        got = {}
        th = threading.Thread(target=lambda: got.setdefault("slow", sb.read_file("slow")), daemon=True)
        th.start()
        host.wait_calls(1)
        for i in range(5):
            self.assertEqual(sb.read_file(f"f{i}"), f"f{i}".encode())
        host.sock.sendall(lendwire.encode_frame(pb.LentReply(id=held[0].id, read_file=pb.ReadFileResponse(data=b"slow"))))
        th.join(10)
        self.assertEqual(got.get("slow"), b"slow")

    def test_giving_up_cancels_on_the_host(self):
        host = _FakeHost(lambda c: None)  # never answers
        self.addCleanup(host.close)
        with self.assertRaises(lendwire.CallError) as cm:
            host.conn.call(pb.LentCall(info=pb.SandboxID(id="sb")), timeout=0.05)
        self.assertEqual(cm.exception.code, "DEADLINE_EXCEEDED")
        with self.assertRaises(lendwire.CallError) as cm:
            host.conn.call(pb.LentCall(info=pb.SandboxID(id="sb")), active=lambda: False)
        self.assertEqual(cm.exception.code, "CANCELLED")
        calls = host.wait_calls(4)
        self.assertEqual([c.WhichOneof("call") for c in calls], ["info", "cancel", "info", "cancel"])
        self.assertEqual((calls[1].id, calls[3].id), (calls[0].id, calls[2].id))

    def test_lost_connection_is_unavailable(self):
        cases = [
            ("host closes", lambda host: host.close()),
            ("frame over the limit", lambda host: host.sock.sendall(struct.pack(">I", lendwire.MAX_FRAME + 1))),
            ("not protobuf", lambda host: host.sock.sendall(struct.pack(">I", 3) + b"\xff\xff\xff")),
        ]
        for name, end in cases:
            with self.subTest(name):
                host = _FakeHost(lambda c: None)
                self.addCleanup(host.close)
                got = {}

                def call():
                    try:
                        host.conn.call(pb.LentCall(info=pb.SandboxID(id="sb")))
                    except lendwire.CallError as e:
                        got["code"] = e.code
                th = threading.Thread(target=call, daemon=True)
                th.start()
                host.wait_calls(1)
                end(host)
                th.join(10)
                self.assertEqual(got.get("code"), "UNAVAILABLE")
                self.assertTrue(host.conn.broken)
                with self.assertRaises(lendwire.CallError) as cm:
                    host.conn.call(pb.LentCall(info=pb.SandboxID(id="sb")))
                self.assertEqual(cm.exception.code, "UNAVAILABLE")

    def test_read_frame_refuses_bad_input(self):
        cases = [
            ("over the limit", struct.pack(">I", lendwire.MAX_FRAME + 1), ValueError),
            ("truncated", struct.pack(">I", 10) + b"ab", EOFError),
            ("half a header", b"\x00", EOFError),
        ]
        for name, data, exc in cases:
            with self.subTest(name):
                buf = io.BytesIO(data)

                def recv_exact(n):
                    b = buf.read(n)
                    if len(b) < n:
                        raise EOFError
                    return b
                with self.assertRaises(exc):
                    lendwire.read_frame(recv_exact, pb.LentReply())


class _WireEnv(rl.Env):
    """Its step acts on the reply: "raise" raises, "exit" calls sys.exit,
    "block" waits until its call is no longer active (what a sandbox call
    checks), "big" returns an observation over the frame limit; anything
    else answers at once. Each step records the time left before its
    deadline, as a sandbox call would see it."""

    name = "wire"
    no_sandbox = True

    def __init__(self):
        self.started = threading.Event()
        self.ended = threading.Event()
        self.remaining: List[object] = []

    def tasks(self):
        return [rl.Task("t", "hello")]

    def new_episode(self, ep):
        return rl.Observation(messages=[rl.user(ep.task.prompt)])

    def step(self, ep, reply):
        self.remaining.append(sandbox_mod._remaining())
        what = reply.content
        if what == "raise":
            raise RuntimeError(f"boom in {ep.id}")
        if what == "exit":
            sys.exit(3)
        if what == "block":
            self.started.set()
            active = sandbox_mod._active()
            while active():
                time.sleep(0.005)
            self.ended.set()
        if what == "big":
            return rl.Observation(info={"x": "y" * (episodes.MAX_FRAME + 1)})
        return rl.Observation(reward=1, metrics={"len": len(what)})


class _EpisodeClient:
    """The host's end of a connection to an episode socket: sends EnvCall
    frames and collects the EnvReply frames by id."""

    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.replies: Dict[int, pb.EnvReply] = {}
        self.got = threading.Condition()
        self.eof = False
        self._next = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            while True:
                rep = pb.EnvReply()
                lendwire.read_frame(lambda n: lendwire.recv_exact(self.sock, n), rep)
                with self.got:
                    self.replies[rep.id] = rep
                    self.got.notify_all()
        except (EOFError, OSError):
            with self.got:
                self.eof = True
                self.got.notify_all()

    def send(self, call: pb.EnvCall) -> int:
        if not call.id:
            self._next += 1
            call.id = self._next
        self.sock.sendall(lendwire.encode_frame(call))
        return call.id

    def wait(self, cid: int, timeout: float = 10) -> pb.EnvReply:
        with self.got:
            self.got.wait_for(lambda: cid in self.replies or self.eof, timeout)
            if cid not in self.replies:
                raise AssertionError(f"no reply to call {cid} (connection ended: {self.eof})")
            return self.replies.pop(cid)

    def call(self, call: pb.EnvCall) -> pb.EnvReply:
        return self.wait(self.send(call))

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _step(eid: str, content: str, **kw) -> pb.EnvCall:
    return pb.EnvCall(step=pb.StepRequest(episode_id=eid, reply=rl.Message("assistant", content).to_pb()), **kw)


def _new(eid: str) -> pb.EnvCall:
    return pb.EnvCall(new_episode=pb.NewEpisodeRequest(episode_id=eid, task=rl.Task("t", "hello").to_pb()))


class EpisodeSocketTest(unittest.TestCase):
    """NewEpisode, Step and End as frames on the plugin's episode socket."""

    def setUp(self):
        logging.getLogger("rlhost_env").disabled = True  # the failures below log tracebacks
        self.addCleanup(setattr, logging.getLogger("rlhost_env"), "disabled", False)
        self.env = _WireEnv()
        self.srv = server_mod.EnvServicer(self.env)
        self.addCleanup(self.srv.episodes.close)
        self.path = self.srv.describe(None, None).episode_socket
        self.assertTrue(self.path, "Describe names no episode socket")
        self.host = _EpisodeClient(self.path)
        self.addCleanup(self.host.close)

    def _grpc(self):
        """The same servicer served over gRPC, as the host would reach a
        plugin that serves no socket; returns a caller of its methods."""
        from concurrent import futures
        import grpc
        d = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(d, ignore_errors=True))
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), handlers=[self.srv.handler()])
        server.add_insecure_port("unix:" + os.path.join(d, "g.sock"))
        server.start()
        self.addCleanup(server.stop, None)
        ch = grpc.insecure_channel("unix:" + os.path.join(d, "g.sock"))
        self.addCleanup(ch.close)

        def call(c: pb.EnvCall):
            which = c.WhichOneof("call")
            method = {"new_episode": "NewEpisode", "step": "Step", "end": "End"}[which]
            fn = ch.unary_unary(f"/rlhost.v1.Environment/{method}", request_serializer=lambda m: m.SerializeToString(),
                                response_deserializer=pb.Observation.FromString)
            try:
                return fn(getattr(c, which), timeout=10), None
            except grpc.RpcError as e:
                return None, (e.code().value[0], e.details())
        return call

    def test_socket_is_private(self):
        st = os.stat(os.path.dirname(self.path))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o700)
        self.assertTrue(stat.S_ISSOCK(os.stat(self.path).st_mode))
        self.assertEqual(self.srv.describe(None, None).episode_socket, self.path, "a second Describe opened another")

    def test_calls_and_errors_as_over_grpc(self):
        grpc_call = self._grpc()
        for c in (_new("e"), _new("g")):
            self.assertEqual(self.host.call(c).observation.messages[0].content, "hello")
        cases = [
            # (name, call on the socket, call over gRPC, code, text in the message)
            ("step", _step("e", "four"), _step("g", "four"), 0, ""),
            ("unknown episode", _step("x", "hi"), _step("x", "hi"), 5, "episode x: not found"),
            ("episode started twice", _new("e"), _new("g"), 6, "already started"),
            ("exception in the env", _step("e", "raise"), _step("g", "raise"), 2, "RuntimeError: boom in"),
            ("sys.exit in the env", _step("e", "exit"), _step("g", "exit"), 2, "SystemExit: 3"),
            ("serves on after failures", _step("e", "after"), _step("g", "after"), 0, ""),
        ]
        for name, frame, rpc, code, text in cases:
            with self.subTest(name):
                rep = self.host.call(frame)
                obs, err = grpc_call(rpc)
                if code == 0:
                    self.assertEqual(rep.WhichOneof("result"), "observation", rep)
                    self.assertEqual(rep.observation, obs)
                    self.assertEqual(rep.observation.reward, 1)
                    continue
                self.assertEqual(rep.WhichOneof("result"), "error", rep)
                self.assertEqual(rep.error.code, code)
                self.assertIn(text, rep.error.message)
                self.assertEqual(rep.error.reason, "", "gRPC sends no ErrorInfo for this error")
                # gRPC fails the same call with the same code and message
                # (but for the episode's id).
                self.assertEqual(err, (code, rep.error.message.replace(" e", " g").replace("episode e", "episode g")))

    def test_errors_only_frames_have(self):
        # A smaller limit stands in for 256 MiB.
        patch = unittest.mock.patch.object(episodes, "MAX_FRAME", 4096)
        patch.start()
        self.addCleanup(patch.stop)
        cases = [
            ("reply over the frame limit", pb.EnvCall(step=_step("e", "big").step), 11, "TOO_LARGE", "exceeds"),
            ("a call this plugin does not know", pb.EnvCall(), 12, "UNIMPLEMENTED", "not supported"),
        ]
        self.host.call(_new("e"))
        for name, call, code, reason, text in cases:
            with self.subTest(name):
                rep = self.host.call(call)
                self.assertEqual((rep.error.code, rep.error.reason), (code, reason), rep)
                self.assertIn(text, rep.error.message)
        self.assertEqual(self.host.call(_step("e", "ok")).observation.reward, 1)

    def test_cancel_and_deadline_end_the_call(self):
        self.host.call(_new("e"))
        cases = [
            # (name, the call, how it is given up on)
            ("cancel frame", _step("e", "block"), lambda cid: self.host.send(pb.EnvCall(id=cid, cancel=pb.Empty()))),
            ("deadline", _step("e", "block", timeout_ns=200_000_000), lambda cid: None),
            ("connection ends", _step("e", "block"), lambda cid: self.host.close()),
        ]
        for name, call, give_up in cases:
            with self.subTest(name):
                self.env.started.clear()
                self.env.ended.clear()
                cid = self.host.send(call)
                self.assertTrue(self.env.started.wait(10))
                self.assertFalse(self.env.ended.wait(0.05), "the call ended before it was given up on")
                give_up(cid)
                self.assertTrue(self.env.ended.wait(10), "the env's step still runs")
        # Time left before the deadline, as a sandbox call sees it.
        self.assertIsNone(self.env.remaining[0])
        self.assertGreater(self.env.remaining[1], 0)
        self.assertLessEqual(self.env.remaining[1], 0.2)
        # A new connection is served after one ended.
        host = _EpisodeClient(self.path)
        self.addCleanup(host.close)
        self.assertEqual(host.call(_step("e", "ok")).observation.reward, 1)

    def test_calls_run_concurrently(self):
        self.host.call(_new("e"))
        blocked = self.host.send(_step("e", "block"))
        self.assertTrue(self.env.started.wait(10))
        for i in range(5):
            self.assertEqual(self.host.call(_step("e", f"s{i}")).observation.metrics["len"], 2)
        self.host.send(pb.EnvCall(id=blocked, cancel=pb.Empty()))
        self.assertEqual(self.host.wait(blocked).observation.reward, 1)

    def test_large_call(self):
        self.host.call(_new("e"))
        big = "x" * (3 << 20)  # read in pieces
        self.assertEqual(self.host.call(_step("e", big)).observation.metrics["len"], len(big))

    def test_bad_frames_close_the_connection(self):
        cases = [
            ("over the limit", lambda h: h.sock.sendall(struct.pack(">I", lendwire.MAX_FRAME + 1))),
            ("not protobuf", lambda h: h.sock.sendall(struct.pack(">I", 3) + b"\xff\xff\xff")),
            ("id reused while its call runs", lambda h: (h.send(_step("e", "block", id=77)),
                                                         self.env.started.wait(10), h.send(_step("e", "x", id=77)))),
        ]
        self.host.call(_new("e"))
        for name, bad in cases:
            with self.subTest(name):
                self.env.started.clear()
                h = _EpisodeClient(self.path)
                self.addCleanup(h.close)
                bad(h)
                with h.got:
                    self.assertTrue(h.got.wait_for(lambda: h.eof, 10), "the connection stays open")
        self.assertEqual(self.host.call(_step("e", "ok")).observation.reward, 1)

    def test_shutdown_removes_the_socket(self):
        self.host.call(_new("e"))
        cid = self.host.send(_step("e", "block"))
        self.assertTrue(self.env.started.wait(10))
        self.srv.shutdown(None, None)
        self.assertFalse(os.path.exists(os.path.dirname(self.path)))
        self.assertTrue(self.env.ended.wait(10), "a call still running was not cancelled")
        with self.host.got:
            self.assertTrue(self.host.got.wait_for(lambda: self.host.eof, 10))
        self.assertNotIn(cid, self.host.replies)
        self.assertEqual(self.srv.describe(None, None).episode_socket, "", "opened again after Shutdown")

    def test_no_socket_leaves_the_field_empty(self):
        s = episodes.EpisodeSocket(lambda c, ctx: pb.Observation(), tmpdir="/nonexistent/dir")
        self.assertEqual(s.open(), "")
        s.close()



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
