"""Serves an Env as rlhost's Environment gRPC service inside a go-plugin
plugin process, and NewEpisode, Step and End also on its episode socket
(see episodes). It owns the live episodes and the connections to the
lent-sandbox sockets (the host's, or a backend's), one per socket, and turns
an author's exception into that call's error."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from typing import Callable, Dict, Optional

import grpc

from . import goplugin
from .episodes import REASON_UNIMPLEMENTED, Aborted, EpisodeSocket
from ._pb import rlhost_pb2 as pb
from .env import Config, Env, Episode
from .lendwire import Connection
from .sandbox import Sandbox, _call
from .types import FINISH_CANCELLED, ConfigError, Diagnostic, Message, Task, as_observation, schema_json

# Must match core/sdk/pluginbase: the handshake cookie and the app protocol.
COOKIE_KEY = "RLHOST_PLUGIN"
COOKIE_VALUE = "c1d2b6a4-rlhost-plugin-v1"
PROTOCOL_VERSION = 2
KIND_ENV = "env"

# Settings the host decodes itself in the env block of a Python plugin.
RESERVED_SETTINGS = {"plugin", "sandbox", "pass_env", "python"}

# Bounds the clean-up when the host dies without calling Shutdown.
ORPHAN_SHUTDOWN_SECONDS = 30.0

log = logging.getLogger("rlhost_env")


class _Connections:
    """Connects to each lent-sandbox socket once and keeps the connection:
    the host lends every episode's sandbox on one socket. A failed connect is
    not kept, and a connection that broke is replaced, at the next episode."""

    def __init__(self, connect: Callable[[str], Connection] = Connection):
        self._connect = connect
        self._mu = threading.Lock()  # held across a connect, so concurrent episodes connect once
        self._conns: Dict[str, Connection] = {}

    def get(self, path: str) -> Connection:
        with self._mu:
            conn = self._conns.get(path)
            if conn is None or conn.broken:
                conn = self._connect(path)
                self._conns[path] = conn
            return conn

    def close(self) -> None:
        with self._mu:
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()


class EnvServicer:
    """rlhost.v1.Environment, implemented over an Env."""

    def __init__(self, env: Env, *, max_workers: int = 64):
        self.env = env
        self.conns = _Connections()
        self.episodes = EpisodeSocket(self.handle_episode, max_workers=max_workers)
        self._mu = threading.Lock()
        self._live: Dict[str, Optional[Episode]] = {}  # None: still starting

    # -- helpers --

    def _fail(self, context, what: str, err: BaseException):
        """Logs the traceback and fails the call with the exception's text."""
        log.error("%s failed", what, exc_info=err)
        context.abort(grpc.StatusCode.UNKNOWN, f"{what}: {type(err).__name__}: {err}")

    def _run(self, context, what: str, fn, *args):
        _call.context = context
        try:
            return fn(*args)
        except BaseException as e:  # noqa: BLE001 - the author's bug (even sys.exit) fails this call only
            self._fail(context, what, e)
        finally:
            _call.context = None

    # -- rpcs --

    def describe(self, _req, context) -> pb.PluginInfo:
        """Also opens the episode socket, at the host's first call, and
        names it."""
        clash = sorted(set(type(self.env).settings) & RESERVED_SETTINGS)
        if clash:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"env {self.env.name} declares settings rlhost reserves for itself: {', '.join(clash)}")
        spec = schema_json(type(self.env).settings)
        return pb.PluginInfo(name=self.env.name, version=self.env.version, kind=KIND_ENV,
                             description=self.env.description, config_schema_json=json.dumps(spec).encode(),
                             no_sandbox=bool(self.env.no_sandbox), episode_socket=self.episodes.open(),
                             lent_tokens=True)

    def configure(self, req: pb.ConfigureRequest, _context) -> pb.ConfigureResponse:
        settings = json.loads(req.config_json) if req.config_json else {}
        cfg = Config(name=req.name, base_dir=req.base_dir, run_id=req.run_id)
        try:
            diags = self.env.configure(settings, cfg) or []
        except ConfigError as e:
            diags = [e.diagnostic]
        except Exception as e:  # noqa: BLE001
            log.error("configure failed", exc_info=e)
            diags = [Diagnostic(f"{self.env.name} failed to configure", f"{type(e).__name__}: {e}")]
        return pb.ConfigureResponse(diagnostics=[d.to_pb() for d in diags])

    def tasks(self, _req, context) -> pb.TasksResponse:
        ts = self._run(context, "tasks", self.env.tasks)
        out = pb.TasksResponse()
        for t in ts:
            if not isinstance(t, Task):
                context.abort(grpc.StatusCode.UNKNOWN, f"tasks: got a {type(t).__name__}, want rlhost_env.Task")
            out.tasks.append(t.to_pb())
        return out

    def new_episode(self, req: pb.NewEpisodeRequest, context) -> pb.Observation:
        eid = req.episode_id
        with self._mu:
            if eid in self._live:
                context.abort(grpc.StatusCode.ALREADY_EXISTS, f"episode {eid} already started")
            self._live[eid] = None
        sandbox = None
        try:
            if req.sandbox_socket:
                sandbox = Sandbox(self.conns.get(req.sandbox_socket), req.sandbox_id, req.sandbox_token)
            ep = Episode(id=eid, task=Task.from_pb(req.task), sandbox=sandbox, seed=req.seed,
                         group=req.group, index=req.index)
        except Exception as e:  # noqa: BLE001
            self._forget(eid)
            self._fail(context, f"dial lent sandbox for episode {eid}", e)
        _call.context = context
        try:
            obs = as_observation(self.env.new_episode(ep))
        except BaseException as e:  # noqa: BLE001
            self._forget(eid)
            self._fail(context, f"new_episode {eid}", e)
        finally:
            _call.context = None
        if not context.is_active():
            # The host gave up waiting and will never call end for a session
            # it did not get: end it here, so end still runs exactly once.
            self._end_quietly(ep, FINISH_CANCELLED)
            self._forget(eid)
            context.abort(grpc.StatusCode.CANCELLED, f"episode {eid}: cancelled while starting")
        with self._mu:
            self._live[eid] = ep
        return obs.to_pb()

    def _forget(self, eid: str) -> None:
        with self._mu:
            self._live.pop(eid, None)

    def _get(self, eid: str, context) -> Episode:
        with self._mu:
            live = self._live.get(eid)
        if live is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"episode {eid}: not found")
        return live

    def step(self, req: pb.StepRequest, context) -> pb.Observation:
        live = self._get(req.episode_id, context)
        obs = self._run(context, f"step {req.episode_id}", self.env.step, live, Message.from_pb(req.reply))
        try:
            return as_observation(obs).to_pb()
        except Exception as e:  # noqa: BLE001
            self._fail(context, f"step {req.episode_id}", e)

    def end(self, req: pb.EndRequest, context) -> pb.Observation:
        with self._mu:
            live = self._live.get(req.episode_id)
            if live is not None:
                del self._live[req.episode_id]
        if live is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"episode {req.episode_id}: not found")
        obs = self._run(context, f"end {req.episode_id}", self.env.end, live, req.reason)
        return as_observation(obs).to_pb()

    def handle_episode(self, call: pb.EnvCall, context) -> pb.Observation:
        """Answers one call on the episode socket with the gRPC method's
        own code, so both wires behave alike."""
        which = call.WhichOneof("call")
        if which == "new_episode":
            return self.new_episode(call.new_episode, context)
        if which == "step":
            return self.step(call.step, context)
        if which == "end":
            return self.end(call.end, context)
        # A call this plugin does not know (a newer host).
        raise Aborted(grpc.StatusCode.UNIMPLEMENTED, f"episode call {which}: not supported by this plugin",
                      REASON_UNIMPLEMENTED)

    def shutdown(self, _req, _context) -> pb.Empty:
        self.end_all(FINISH_CANCELLED, deadline=None)
        return pb.Empty()

    def _end_quietly(self, ep: Episode, reason: str) -> None:
        try:
            self.env.end(ep, reason)
        except Exception as e:  # noqa: BLE001
            log.error("end %s failed", ep.id, exc_info=e)

    def end_all(self, reason: str, deadline: Optional[float]) -> None:
        """Ends every live episode, so the env can release what it holds,
        then closes the lent-sandbox connection and removes the episode
        socket."""
        with self._mu:
            live = [x for x in self._live.values() if x is not None]
            self._live = {}
        try:
            for x in live:
                if deadline is not None and time.monotonic() > deadline:
                    log.error("gave up ending %d episodes: out of time", len(live))
                    return
                self._end_quietly(x, reason)
        finally:
            self.conns.close()
            self.episodes.close()

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(fn, req):
            return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=req.FromString,
                                                       response_serializer=lambda m: m.SerializeToString())
        return grpc.method_handlers_generic_handler("rlhost.v1.Environment", {
            "Describe": unary(self.describe, pb.Empty),
            "Configure": unary(self.configure, pb.ConfigureRequest),
            "Tasks": unary(self.tasks, pb.Empty),
            "NewEpisode": unary(self.new_episode, pb.NewEpisodeRequest),
            "Step": unary(self.step, pb.StepRequest),
            "End": unary(self.end, pb.EndRequest),
            "Shutdown": unary(self.shutdown, pb.Empty),
        })


def serve(env: Env, *, max_workers: int = 64, log_level: int = logging.INFO) -> None:
    """Runs env as an rlhost environment plugin until the host stops it.
    Call it from the plugin script's main: ``serve(MyEnv())``.

    Logging records (the standard logging module) go to the host as hclog
    JSON on stderr and appear in rlhost's log under the plugin's name.
    max_workers bounds the calls handled at once, over gRPC and on the
    episode socket each; keep it above the run's concurrency (each live
    step holds one)."""
    root = logging.getLogger()
    if not any(isinstance(h, goplugin.HCLogHandler) for h in root.handlers):
        root.addHandler(goplugin.HCLogHandler(sys.stderr))
    root.setLevel(log_level)
    holder: Dict[str, EnvServicer] = {}

    def services(_broker: goplugin.Broker):
        holder["s"] = EnvServicer(env, max_workers=max_workers)
        return [holder["s"].handler()]

    def on_stop(reason: str) -> None:
        s = holder.get("s")
        if s is not None:
            s.end_all(FINISH_CANCELLED, deadline=time.monotonic() + ORPHAN_SHUTDOWN_SECONDS)

    p = goplugin.Plugin(cookie_key=COOKIE_KEY, cookie_value=COOKIE_VALUE, app_version=PROTOCOL_VERSION,
                        services=services, on_stop=on_stop, max_workers=max_workers)
    try:
        p.serve()
    except goplugin.PluginError as e:
        log.error("cannot start plugin: %s", e)
        sys.stderr.flush()
        os._exit(1)
