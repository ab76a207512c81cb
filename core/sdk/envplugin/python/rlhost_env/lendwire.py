"""The plugin's end of the lent-sandbox wire (Go: core/sdk/wire/lend).

The host serves the sandboxes it lends on a Unix socket, whose path comes in
NewEpisodeRequest.sandbox_socket. Each frame is a 4-byte big-endian length
and then a protobuf message: rlhost.v1.LentCall from the plugin,
rlhost.v1.LentReply from the host. A call carries an id the plugin chooses;
calls on one connection run at once on the host and are answered by id. A
LentCall with ``cancel`` set stops the running call of that id.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Callable, Dict, Optional

import grpc

from ._pb import rlhost_pb2 as pb
from .goplugin import MAX_MESSAGE_BYTES

# Bounds one frame's body: the gRPC message limit plus the frame's own id
# and tags, as the host's core/sdk/wire/frames.MaxSize.
MAX_FRAME = MAX_MESSAGE_BYTES + 64

_HEADER = struct.Struct(">I")

# gRPC status code numbers, as LentError.code carries them, by name.
_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}

# How often a waiting call checks whether its caller is still there.
_POLL_SECONDS = 0.1


class CallError(Exception):
    """A call failed: code is the gRPC status name the host's error maps to
    (NOT_FOUND, PERMISSION_DENIED, ...), or UNAVAILABLE when the connection
    to the host is gone, DEADLINE_EXCEEDED or CANCELLED when the caller gave
    up."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def encode_frame(msg) -> bytes:
    body = msg.SerializeToString()
    if len(body) > MAX_FRAME:
        raise CallError("OUT_OF_RANGE", f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return _HEADER.pack(len(body)) + body


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """n bytes from sock, or EOFError if it ends first. A large frame's
    buffer grows as its bytes arrive."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("the peer closed the connection")
        buf += chunk
    return bytes(buf)


def read_frame(recv_exact: Callable[[int], bytes], msg) -> None:
    """Reads one frame into msg; recv_exact(n) returns n bytes or raises."""
    (n,) = _HEADER.unpack(recv_exact(_HEADER.size))
    if n > MAX_FRAME:
        raise ValueError(f"frame of {n} bytes exceeds {MAX_FRAME}")
    msg.ParseFromString(recv_exact(n))


class _Waiter:
    __slots__ = ("event", "reply")

    def __init__(self):
        self.event = threading.Event()
        self.reply: Optional[pb.LentReply] = None


class Connection:
    """One connection to a lent-sandbox socket (the host's, or a backend's),
    shared by every episode lent there. Safe to use from several threads."""

    def __init__(self, path: str, connect: Optional[Callable[[str], socket.socket]] = None):
        self._sock = (connect or _connect_unix)(path)
        self._wlock = threading.Lock()  # one frame at a time
        self._mu = threading.Lock()
        self._next = 0
        self._pending: Dict[int, _Waiter] = {}
        self._error: Optional[str] = None  # why the connection ended
        threading.Thread(target=self._read, name="rlhost-lendwire", daemon=True).start()

    @property
    def broken(self) -> bool:
        with self._mu:
            return self._error is not None

    def close(self) -> None:
        self._fail("closed")

    def call(self, call: pb.LentCall, timeout: Optional[float] = None,
             active: Optional[Callable[[], bool]] = None) -> pb.LentReply:
        """Sends call (its id is set here) and returns the reply. It gives up
        after timeout seconds, or once active() turns false, and cancels the
        call on the host. A reply carrying an error raises CallError."""
        w = _Waiter()
        with self._mu:
            if self._error is not None:
                raise CallError("UNAVAILABLE", f"lent sandbox connection lost: {self._error}")
            self._next += 1
            call.id = self._next
            self._pending[call.id] = w
        try:
            self._send(encode_frame(call))
        except CallError:
            self._forget(call.id)
            raise
        if not self._wait(w, timeout, active):
            self._forget(call.id)
            try:
                self._send(encode_frame(pb.LentCall(id=call.id, cancel=pb.Empty())))
            except CallError:
                pass  # the connection broke: the host cancels all its calls
            if active is not None and not active():
                raise CallError("CANCELLED", "the call was cancelled")
            raise CallError("DEADLINE_EXCEEDED", "deadline exceeded")
        rep = w.reply
        if rep is None:
            with self._mu:
                raise CallError("UNAVAILABLE", f"lent sandbox connection lost: {self._error}")
        if rep.HasField("error"):
            e = rep.error
            raise CallError(_CODE_NAMES.get(e.code, "UNKNOWN"), e.message)
        return rep

    @staticmethod
    def _wait(w: _Waiter, timeout: Optional[float], active: Optional[Callable[[], bool]]) -> bool:
        if active is None:
            return w.event.wait(timeout)
        # Wakes now and then to notice a caller that went away.
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = _POLL_SECONDS if deadline is None else min(_POLL_SECONDS, deadline - time.monotonic())
            if step <= 0:
                return w.event.is_set()
            if w.event.wait(step):
                return True
            if not active():
                return False

    def _forget(self, call_id: int) -> None:
        with self._mu:
            self._pending.pop(call_id, None)

    def _send(self, frame: bytes) -> None:
        try:
            with self._wlock:
                self._sock.sendall(frame)
        except OSError as e:
            self._fail(f"write: {e}")
            raise CallError("UNAVAILABLE", f"lent sandbox connection lost: {e}") from None

    def _read(self) -> None:
        try:
            while True:
                rep = pb.LentReply()
                read_frame(lambda n: recv_exact(self._sock, n), rep)
                with self._mu:
                    w = self._pending.pop(rep.id, None)
                if w is not None:  # None: its caller gave up
                    w.reply = rep
                    w.event.set()
        except Exception as e:  # noqa: BLE001 - any failure ends the connection
            self._fail(str(e) or type(e).__name__)

    def _fail(self, why: str) -> None:
        with self._mu:
            if self._error is not None:
                return
            self._error = why
            waiting, self._pending = list(self._pending.values()), {}
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        for w in waiting:
            w.event.set()


def _connect_unix(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError:
        s.close()
        raise
    return s
