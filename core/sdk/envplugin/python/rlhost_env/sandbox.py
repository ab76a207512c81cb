"""The sandbox lent to one episode, reached over its lent-sandbox socket
(its backend's, or the host's) on the one connection all episodes lent
there share (see lendwire). Calls block and return plain Python values; a failed call raises
SandboxError."""

from __future__ import annotations

import threading
from typing import Dict, List, Optional, Sequence, Union

from ._pb import rlhost_pb2 as pb
from .lendwire import CallError, Connection
from .types import ExecResult, FileInfo

# The deadline of the host's call that is running on this thread (Step,
# NewEpisode, End): sandbox calls made while handling it never outlive it.
_call = threading.local()


# A call without a deadline reports an enormous time remaining; anything
# beyond this means "none".
_NO_DEADLINE = 365 * 24 * 3600.0


def _remaining() -> Optional[float]:
    ctx = getattr(_call, "context", None)
    left = ctx.time_remaining() if ctx is not None else None
    return left if left is not None and left < _NO_DEADLINE else None


def _active():
    """What tells a sandbox call that the host's call on this thread was
    cancelled, so the sandbox call is cancelled too; None outside one."""
    ctx = getattr(_call, "context", None)
    return ctx.is_active if ctx is not None else None


class SandboxError(Exception):
    """A sandbox call failed. code is the gRPC status name: NOT_FOUND for a
    missing file, PERMISSION_DENIED for a path outside the sandbox,
    OUT_OF_RANGE for a file over max_bytes, RESOURCE_EXHAUSTED for a limit,
    NOT_FOUND "not lent to this environment" once the episode has ended."""

    def __init__(self, what: str, err: CallError):
        self.code = err.code
        super().__init__(f"{what}: {err.message} ({self.code})")


def _path(p: Union[str, bytes]) -> bytes:
    return p if isinstance(p, bytes) else p.encode("utf-8", "surrogateescape")


class Sandbox:
    """One sandbox, lent to the current episode on the host's socket or on its
    backend's. Every call names it and carries the episode's token: the
    connection is shared by all episodes lent on that socket, which routes
    by id. Safe to use from several threads."""

    def __init__(self, conn: Connection, sandbox_id: str, token: bytes = b""):
        self.id = sandbox_id
        self._conn = conn
        self._token = token

    def _call(self, what: str, call: pb.LentCall, field: str):
        call.token = self._token
        try:
            rep = self._conn.call(call, timeout=_remaining(), active=_active())
        except CallError as e:
            raise SandboxError(f"{what} in sandbox {self.id}", e) from None
        if rep.WhichOneof("result") != field:
            raise SandboxError(f"{what} in sandbox {self.id}",
                               CallError("INTERNAL", f"the server answered with {rep.WhichOneof('result')}"))
        return getattr(rep, field)

    def exec(self, command: Union[str, Sequence[str]], *, stdin: Union[bytes, str] = b"",
             env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
             timeout: Optional[float] = None, max_output: int = 0) -> ExecResult:
        """Runs command (an argv list, or a string run by /bin/sh -c) and waits
        for it. timeout is in seconds; 0 or None uses the sandbox block's
        timeout. A non-zero exit is a result, not an error."""
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        if not argv:
            raise ValueError("exec: empty command")
        req = pb.ExecRequest(
            sandbox_id=self.id,
            command=[_path(a) for a in argv],
            stdin=stdin.encode() if isinstance(stdin, str) else stdin,
            env={k: _path(v) for k, v in (env or {}).items()},
            dir=_path(cwd) if cwd else b"",
            timeout_ms=int(timeout * 1000) if timeout else 0,
            max_output_bytes=max_output,
        )
        return ExecResult.from_pb(self._call(f"exec {argv[0]}", pb.LentCall(exec=req), "exec"))

    def read_file(self, path: str, max_bytes: int = 0) -> bytes:
        """Returns the file's content; max_bytes > 0 fails (OUT_OF_RANGE) for
        a larger file."""
        req = pb.ReadFileRequest(sandbox_id=self.id, path=_path(path), max_bytes=max_bytes)
        return self._call(f"read {path}", pb.LentCall(read_file=req), "read_file").data

    def read_text(self, path: str, max_bytes: int = 0) -> str:
        return self.read_file(path, max_bytes).decode(errors="replace")

    def write_file(self, path: str, data: Union[bytes, str], mode: int = 0o644) -> None:
        """Creates or replaces the file."""
        raw = data.encode() if isinstance(data, str) else data
        req = pb.WriteFileRequest(sandbox_id=self.id, path=_path(path), data=raw, mode=mode)
        self._call(f"write {path}", pb.LentCall(write_file=req), "write_file")

    def list(self, path: str) -> List[FileInfo]:
        """Lists a directory."""
        req = pb.ListFilesRequest(sandbox_id=self.id, path=_path(path))
        return [FileInfo.from_pb(f) for f in self._call(f"list {path}", pb.LentCall(list_files=req), "list_files").files]
