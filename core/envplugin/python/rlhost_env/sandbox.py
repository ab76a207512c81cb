"""The sandbox the host lends to one episode, reached over the go-plugin
broker on the one connection all episodes share. Calls block and return
plain Python values; a failed call raises SandboxError."""

from __future__ import annotations

import threading
from typing import Dict, List, Optional, Sequence, Union

import grpc

from ._pb import rlhost_pb2 as pb
from .types import ExecResult, FileInfo

_SERVICE = "/rlhost.v1.Sandbox/"

# The deadline of the host's call that is running on this thread (Step,
# NewEpisode, End): sandbox calls made while handling it never outlive it.
_call = threading.local()


# A call without a deadline reports an enormous time remaining, which gRPC
# cannot pass on as a timeout; anything beyond this means "none".
_NO_DEADLINE = 365 * 24 * 3600.0


def _remaining() -> Optional[float]:
    ctx = getattr(_call, "context", None)
    left = ctx.time_remaining() if ctx is not None else None
    return left if left is not None and left < _NO_DEADLINE else None


class SandboxError(Exception):
    """A sandbox call failed. code is the gRPC status name: NOT_FOUND for a
    missing file, PERMISSION_DENIED for a path outside the sandbox,
    OUT_OF_RANGE for a file over max_bytes, RESOURCE_EXHAUSTED for a limit,
    NOT_FOUND "not lent to this environment" once the episode has ended."""

    def __init__(self, what: str, err: grpc.RpcError):
        code = err.code() if hasattr(err, "code") else None
        self.code = code.name if code is not None else "UNKNOWN"
        detail = err.details() if hasattr(err, "details") else str(err)
        super().__init__(f"{what}: {detail} ({self.code})")


def _path(p: Union[str, bytes]) -> bytes:
    return p if isinstance(p, bytes) else p.encode("utf-8", "surrogateescape")


class Sandbox:
    """One sandbox, lent by the host to the current episode. Every call names
    it: the channel is shared by all episodes, and the host routes by id.
    Safe to use from several threads."""

    def __init__(self, channel: grpc.Channel, sandbox_id: str):
        self.id = sandbox_id
        self._exec = channel.unary_unary(_SERVICE + "Exec", request_serializer=pb.ExecRequest.SerializeToString,
                                         response_deserializer=pb.ExecResult.FromString)
        self._read = channel.unary_unary(_SERVICE + "ReadFile", request_serializer=pb.ReadFileRequest.SerializeToString,
                                         response_deserializer=pb.ReadFileResponse.FromString)
        self._write = channel.unary_unary(_SERVICE + "WriteFile",
                                          request_serializer=pb.WriteFileRequest.SerializeToString,
                                          response_deserializer=pb.Empty.FromString)
        self._list = channel.unary_unary(_SERVICE + "ListFiles",
                                         request_serializer=pb.ListFilesRequest.SerializeToString,
                                         response_deserializer=pb.ListFilesResponse.FromString)

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
        try:
            return ExecResult.from_pb(self._exec(req, timeout=_remaining()))
        except grpc.RpcError as e:
            raise SandboxError(f"exec {argv[0]} in sandbox {self.id}", e) from None

    def read_file(self, path: str, max_bytes: int = 0) -> bytes:
        """Returns the file's content; max_bytes > 0 fails (OUT_OF_RANGE) for
        a larger file."""
        try:
            return self._read(pb.ReadFileRequest(sandbox_id=self.id, path=_path(path), max_bytes=max_bytes), timeout=_remaining()).data
        except grpc.RpcError as e:
            raise SandboxError(f"read {path} in sandbox {self.id}", e) from None

    def read_text(self, path: str, max_bytes: int = 0) -> str:
        return self.read_file(path, max_bytes).decode(errors="replace")

    def write_file(self, path: str, data: Union[bytes, str], mode: int = 0o644) -> None:
        """Creates or replaces the file."""
        raw = data.encode() if isinstance(data, str) else data
        try:
            self._write(pb.WriteFileRequest(sandbox_id=self.id, path=_path(path), data=raw, mode=mode), timeout=_remaining())
        except grpc.RpcError as e:
            raise SandboxError(f"write {path} in sandbox {self.id}", e) from None

    def list(self, path: str) -> List[FileInfo]:
        """Lists a directory."""
        try:
            r = self._list(pb.ListFilesRequest(sandbox_id=self.id, path=_path(path)), timeout=_remaining())
        except grpc.RpcError as e:
            raise SandboxError(f"list {path} in sandbox {self.id}", e) from None
        return [FileInfo.from_pb(f) for f in r.files]
