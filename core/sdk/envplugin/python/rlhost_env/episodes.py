"""The env's end of the episode socket (Go: core/sdk/envplugin/episodes.go).

The plugin serves NewEpisode, Step and End, the calls on every turn's
latency path, as frames on a Unix socket of its own, beside gRPC, and names
it in Describe (PluginInfo.episode_socket). The host connects once and sends
those calls there; everything else stays on gRPC. The frames are those of
the lent sandbox (see lendwire), the other way round: the host sends
rlhost.v1.EnvCall, the plugin answers rlhost.v1.EnvReply, by id, in whatever
order the calls finish.

Each call runs on a worker thread through the gRPC servicer's own method,
with a FrameContext in place of grpc.ServicerContext, so both wires behave
alike: the same errors with the same status codes, the host's deadline, and
a cancel frame that ends the call's context as a gRPC cancellation does.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
from typing import Callable, Dict, Optional, Set

import grpc

from ._pb import rlhost_pb2 as pb
from .lendwire import _HEADER, MAX_FRAME

log = logging.getLogger("rlhost_env")

# Names the wire in logs and errors, as the Go side does.
WIRE = "env episode"

# The rlhost sentinel reasons (core/sdk/wire/rlhostpb/errors.go) replies here may carry.
REASON_TOO_LARGE = "TOO_LARGE"
REASON_UNIMPLEMENTED = "UNIMPLEMENTED"


class Aborted(Exception):
    """What FrameContext.abort raises: the call fails with this status, and
    the rlhost sentinel reason, if any (core/sdk/wire/rlhostpb/errors.go)."""

    def __init__(self, code: grpc.StatusCode, details: str, reason: str = ""):
        super().__init__(details)
        self.code = code
        self.details = details
        self.reason = reason


class FrameContext:
    """Stands in for grpc.ServicerContext for one call on the episode
    socket: abort fails the call with a status, is_active turns false once
    the host cancels the call, its deadline passes or its connection ends,
    and time_remaining is the time left before that deadline (None: no
    deadline)."""

    __slots__ = ("_cancelled", "_deadline")

    def __init__(self, cancelled: threading.Event, timeout_ns: int = 0):
        self._cancelled = cancelled
        self._deadline = time.monotonic() + timeout_ns / 1e9 if timeout_ns > 0 else None

    def abort(self, code: grpc.StatusCode, details: str):
        if code == grpc.StatusCode.OK:  # as grpc: OK cannot fail a call
            code, details = grpc.StatusCode.UNKNOWN, ""
        raise Aborted(code, details)

    def is_active(self) -> bool:
        if self._cancelled.is_set():
            return False
        return self._deadline is None or time.monotonic() < self._deadline

    def time_remaining(self) -> Optional[float]:
        if self._deadline is None:
            return None
        return max(self._deadline - time.monotonic(), 0.0)


def error_reply(code: int, message: str, reason: str = "") -> pb.EnvReply:
    return pb.EnvReply(error=pb.LentError(code=code, message=message, reason=reason))


def _code(c: grpc.StatusCode) -> int:
    return c.value[0]


# handle(call, context) answers one call with an Observation, or raises:
# Aborted for a status (what server.py's methods do through context.abort),
# anything else for a bug, which fails the call as grpc fails it.
Handler = Callable[[pb.EnvCall, FrameContext], pb.Observation]


def answer(handle: Handler, call: pb.EnvCall, cancelled: threading.Event) -> pb.EnvReply:
    """Runs one call and returns its reply (without its id)."""
    try:
        return pb.EnvReply(observation=handle(call, FrameContext(cancelled, call.timeout_ns)))
    except Aborted as e:
        return error_reply(_code(e.code), e.details, e.reason)
    except BaseException as e:  # noqa: BLE001 - a bug fails this call only, as grpc's server does
        details = f"Exception calling application: {e}"
        log.error("%s", details, exc_info=e)
        return error_reply(_code(grpc.StatusCode.UNKNOWN), details)


def encode_reply(rep: pb.EnvReply) -> bytes:
    """rep as one frame; a reply over MAX_FRAME is replaced by the error the
    Go side sends in its place."""
    body = rep.SerializeToString()
    if len(body) > MAX_FRAME:
        err = error_reply(_code(grpc.StatusCode.OUT_OF_RANGE),
                          f"frame of {len(body)} bytes exceeds {MAX_FRAME}: size limit exceeded", REASON_TOO_LARGE)
        err.id = rep.id
        body = err.SerializeToString()
    return _HEADER.pack(len(body)) + body


class _BadFrame(Exception):
    pass


# The most a read allocates ahead of the bytes that have arrived.
_GROW_STEP = 1 << 20


def _read_exact(f, n: int, between: bool) -> Optional[bytes]:
    """n bytes from f; None at a clean end (between frames), EOFError at an
    end inside a frame. A large frame's buffer grows as its bytes arrive, so
    a length that is a lie costs no more memory than the bytes sent."""
    if n <= _GROW_STEP:
        data = f.read(n)
    else:
        buf = bytearray()
        while len(buf) < n:
            chunk = f.read(min(n - len(buf), _GROW_STEP))
            if not chunk:
                break
            buf += chunk
        data = bytes(buf)
    if len(data) == n:
        return data
    if between and not data:
        return None
    raise EOFError("unexpected EOF")


class _Workers:
    """Daemon threads that run calls, started as calls need them, up to max;
    beyond that calls wait their turn. (Daemon threads: a call blocked in an
    env's code never holds up the process's exit.)"""

    def __init__(self, max_workers: int):
        self._max = max(1, max_workers)
        self._q: "queue.SimpleQueue[Optional[tuple]]" = queue.SimpleQueue()
        self._mu = threading.Lock()
        self._n = 0  # threads started
        self._idle = 0  # threads waiting for a call no submit has claimed
        self._backlog = 0  # calls queued while every thread was busy
        self._closed = False

    def submit(self, fn, *args) -> None:
        item = (fn, args)
        with self._mu:
            if self._closed:
                raise RuntimeError("closed")
            if self._idle > 0:
                self._idle -= 1
            elif self._n < self._max:
                self._n += 1
                threading.Thread(target=self._work, args=(item,), name="rlhost-episode-call", daemon=True).start()
                return
            else:
                self._backlog += 1
        self._q.put(item)

    def _work(self, item) -> None:
        while item is not None:
            fn, args = item
            try:
                fn(*args)
            except BaseException:  # noqa: BLE001 - the thread serves on
                log.exception("%s call failed", WIRE)
            item = None
            with self._mu:
                if self._backlog > 0:
                    self._backlog -= 1
                else:
                    self._idle += 1
            item = self._q.get()

    def close(self) -> None:
        """Ends each thread once it has no call left to run."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            n = self._n
        for _ in range(n):
            self._q.put(None)


class _Conn:
    """One host connection: reads calls until it ends, runs each on the
    pool, and writes replies one frame at a time."""

    def __init__(self, sock: socket.socket, handle: Handler, pool: _Workers):
        self.sock = sock
        self._handle = handle
        self._pool = pool
        self._wlock = threading.Lock()
        self._mu = threading.Lock()
        self._running: Dict[int, threading.Event] = {}
        self._shut = False  # ended on purpose: its end is not logged

    def serve(self) -> None:
        try:
            self._read()
        except _BadFrame as e:
            log.error("%s connection closed: %s", WIRE, e)
        except Exception as e:  # noqa: BLE001 - a broken connection, or a message that does not decode
            if not self._shut:
                log.error("%s connection closed: bad frame: %s: %s", WIRE, type(e).__name__, e)
        finally:
            with self._mu:
                running, self._running = list(self._running.values()), {}
            for ev in running:  # cuts off the connection's calls still running
                ev.set()
            self.shut()

    def _read(self) -> None:
        f = self.sock.makefile("rb")
        try:
            while True:
                hdr = _read_exact(f, _HEADER.size, between=True)
                if hdr is None:
                    return
                (n,) = _HEADER.unpack(hdr)
                if n > MAX_FRAME:
                    raise _BadFrame(f"bad frame: frame of {n} bytes exceeds {MAX_FRAME}")
                call = pb.EnvCall()
                call.ParseFromString(_read_exact(f, n, between=False))
                cid = call.id
                if call.WhichOneof("call") == "cancel":
                    with self._mu:
                        ev = self._running.get(cid)
                    if ev is not None:
                        ev.set()
                    continue
                ev = threading.Event()
                with self._mu:
                    if cid in self._running:
                        raise _BadFrame(f"call id {cid} reused while its call runs")
                    self._running[cid] = ev
                try:
                    self._pool.submit(self._run, call, ev)
                except RuntimeError:  # the pool is shut down: the socket is closing
                    return
        finally:
            f.close()

    def _run(self, call: pb.EnvCall, ev: threading.Event) -> None:
        rep = answer(self._handle, call, ev)
        with self._mu:
            if self._running.get(call.id) is ev:
                del self._running[call.id]
        rep.id = call.id
        frame = encode_reply(rep)
        try:
            with self._wlock:
                self.sock.sendall(frame)
        except OSError:
            self.shut()  # the reader then ends the connection

    def shut(self) -> None:
        self._shut = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class EpisodeSocket:
    """The socket, opened at the first Describe in a directory only this
    user can enter, and served until close, which removes it. handle answers
    one call; at most max_workers calls run at once."""

    def __init__(self, handle: Handler, *, max_workers: int = 64, tmpdir: Optional[str] = None):
        self._handle = handle
        self._max_workers = max_workers
        self._tmpdir = tmpdir
        self._mu = threading.Lock()
        self.path = ""  # "" until opened
        self._dir = ""
        self._ln: Optional[socket.socket] = None
        self._pool: Optional[_Workers] = None
        self._conns: Set[_Conn] = set()
        self._threads: Set[threading.Thread] = set()
        self._closed = False  # after close, no socket is opened again

    def open(self) -> str:
        """Starts serving the socket if it is not yet, and returns its path.
        A socket that cannot be opened is logged and left out ("")."""
        with self._mu:
            if self._closed:
                return ""
            if self.path:
                return self.path
            d = ""
            try:
                d = tempfile.mkdtemp(prefix="rlhost-env-", dir=self._tmpdir)  # mode 0700
                path = os.path.join(d, "episode.sock")
                ln = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    ln.bind(path)
                    ln.listen(64)
                except OSError:
                    ln.close()
                    raise
            except OSError as e:
                if d:
                    shutil.rmtree(d, ignore_errors=True)
                log.warning("no episode socket; the host will use gRPC: %s", e)
                return ""
            self._ln, self._dir, self.path = ln, d, path
            self._pool = _Workers(self._max_workers)
            self._start(self._accept, ln)
            atexit.register(self.close)
            return path

    def _start(self, target, *args) -> None:
        th = threading.Thread(target=target, args=args, name="rlhost-episode-socket", daemon=True)
        self._threads.add(th)
        th.start()

    def _accept(self, ln: socket.socket) -> None:
        while True:
            try:
                sock, _ = ln.accept()
            except OSError as e:
                with self._mu:
                    if not self._closed:
                        log.error("episode socket failed: accept %s connection: %s", WIRE, e)
                return
            c = _Conn(sock, self._handle, self._pool)
            with self._mu:
                if self._closed:
                    c.shut()
                    return
                self._conns.add(c)
                self._start(self._serve_conn, c)

    def _serve_conn(self, c: _Conn) -> None:
        try:
            c.serve()
        finally:
            with self._mu:
                self._conns.discard(c)
                self._threads.discard(threading.current_thread())

    def close(self, timeout: float = 5.0) -> None:
        """Stops serving, cancelling the calls still running on the socket,
        and removes it. Safe to call more than once, from any thread."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            ln, conns, threads, pool = self._ln, list(self._conns), list(self._threads), self._pool
        atexit.unregister(self.close)
        if ln is None:
            return
        try:
            ln.shutdown(socket.SHUT_RDWR)  # wakes accept
        except OSError:
            pass
        ln.close()
        for c in conns:
            c.shut()  # its reader then cancels its running calls
        deadline = time.monotonic() + timeout
        for th in threads:
            if th is not threading.current_thread():
                th.join(max(deadline - time.monotonic(), 0))
        if pool is not None:
            # Calls still running are cancelled and their replies go nowhere;
            # they are not waited for.
            pool.close()
        shutil.rmtree(self._dir, ignore_errors=True)
