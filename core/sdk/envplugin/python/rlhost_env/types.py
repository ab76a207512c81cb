"""Plain data types of the author's API and their protobuf conversions.

Conversions live here, next to the types, so the rest of the package never
touches protobuf messages field by field.
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Union

from ._pb import rlhost_pb2 as pb

# Finish reasons the host understands (core/trajectory.go).
FINISH_DONE = "done"
FINISH_PASSED = "passed"
FINISH_ATTEMPTS_EXHAUSTED = "attempts_exhausted"
FINISH_MAX_TURNS = "max_turns"
FINISH_CONTEXT_LIMIT = "context_limit"
FINISH_TIMEOUT = "timeout"
FINISH_ERROR = "error"
FINISH_CANCELLED = "cancelled"


@dataclass
class ToolCall:
    """A function call the policy asked for; arguments is the JSON text."""

    id: str
    name: str
    arguments: str = ""

    def args(self) -> Dict[str, Any]:
        """The arguments decoded from JSON ({} when empty)."""
        return json.loads(self.arguments) if self.arguments.strip() else {}


@dataclass
class Message:
    role: str
    content: str = ""
    name: str = ""
    tool_calls: List[ToolCall] = field(default_factory=list)
    tool_call_id: str = ""

    def to_pb(self) -> pb.ChatMessage:
        return pb.ChatMessage(
            role=self.role, content=self.content, name=self.name, tool_call_id=self.tool_call_id,
            tool_calls=[pb.ToolCall(id=c.id, type="function", function=pb.FunctionCall(name=c.name, arguments=c.arguments))
                        for c in self.tool_calls],
        )

    @staticmethod
    def from_pb(m: pb.ChatMessage) -> "Message":
        return Message(
            role=m.role, content=m.content, name=m.name, tool_call_id=m.tool_call_id,
            tool_calls=[ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments) for c in m.tool_calls],
        )


def system(text: str) -> Message:
    return Message("system", text)


def user(text: str) -> Message:
    return Message("user", text)


def tool_result(call: ToolCall, text: str) -> Message:
    """The reply to one tool call, as the policy expects it."""
    return Message("tool", text, name=call.name, tool_call_id=call.id)


@dataclass
class Tool:
    """A function offered to the policy; parameters is a JSON Schema object."""

    name: str
    description: str = ""
    parameters: Dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_pb(self) -> pb.ToolSpec:
        return pb.ToolSpec(type="function", name=self.name, description=self.description,
                           parameters_json=json.dumps(self.parameters).encode())


@dataclass
class Task:
    """One task of the dataset. data is any JSON-encodable value; the env gets
    it back, decoded, in Episode.task.data."""

    id: str
    prompt: str = ""
    data: Any = None

    def to_pb(self) -> pb.Task:
        raw = b"" if self.data is None else json.dumps(self.data).encode()
        return pb.Task(id=self.id, prompt=self.prompt, data_json=raw)

    @staticmethod
    def from_pb(t: pb.Task) -> "Task":
        return Task(id=t.id, prompt=t.prompt, data=json.loads(t.data_json) if t.data_json else None)


@dataclass
class Observation:
    """What the env returns after starting, stepping or ending an episode."""

    messages: List[Message] = field(default_factory=list)
    tools: List[Tool] = field(default_factory=list)
    done: bool = False
    reward: float = 0.0
    metrics: Dict[str, float] = field(default_factory=dict)
    info: Dict[str, str] = field(default_factory=dict)
    finish_reason: str = ""

    def to_pb(self) -> pb.Observation:
        return pb.Observation(
            messages=[m.to_pb() for m in self.messages], tools=[t.to_pb() for t in self.tools],
            done=self.done, reward=float(self.reward),
            metrics={k: float(v) for k, v in self.metrics.items()},
            info={k: str(v) for k, v in self.info.items()}, finish_reason=self.finish_reason,
        )


def as_observation(v: Union[Observation, str, Message, None]) -> Observation:
    """Lets an env return a bare prompt string or message where an
    Observation is expected."""
    if v is None:
        return Observation()
    if isinstance(v, Observation):
        return v
    if isinstance(v, str):
        return Observation(messages=[user(v)])
    if isinstance(v, Message):
        return Observation(messages=[v])
    raise TypeError(f"expected an Observation, a prompt string or a Message, got {type(v).__name__}")


# ---- configuration ----------------------------------------------------------


@dataclass
class Diagnostic:
    """A problem in the env block. path names the setting (["tasks"], or
    ["limit", "0", "size"] for the first limit block) so the host can point at
    its line and column; an empty path blames the whole block."""

    summary: str
    detail: str = ""
    path: Sequence[Any] = ()
    warning: bool = False

    def to_pb(self) -> pb.Diagnostic:
        return pb.Diagnostic(severity=1 if self.warning else 0, summary=self.summary, detail=self.detail,
                             path=[str(p) for p in self.path])


class ConfigError(Exception):
    """Raised from Env.configure: becomes one error diagnostic."""

    def __init__(self, summary: str, detail: str = "", path: Sequence[Any] = ()):
        super().__init__(summary if not detail else f"{summary}: {detail}")
        self.diagnostic = Diagnostic(summary, detail, path)


@dataclass
class Setting:
    """One attribute of the env block, decoded and type-checked by the host.

    type is a Python type (str, int, float, bool, list[str], dict[str, int]...)
    or a go-cty type in its JSON form ("string", ["list", "number"])."""

    type: Any
    default: Any = None
    required: bool = False
    description: str = ""
    sensitive: bool = False

    def to_json(self, name: str) -> Dict[str, Any]:
        out: Dict[str, Any] = {"name": name, "type": cty_type(self.type)}
        if self.required:
            out["required"] = True
        if self.default is not None:
            out["default"] = self.default
        if self.description:
            out["description"] = self.description
        if self.sensitive:
            out["sensitive"] = True
        return out


@dataclass
class Block:
    """A nested block of the env block; list=True allows it any number of
    times (the env gets a list of dicts), otherwise at most once (a dict, or
    None when absent)."""

    settings: Dict[str, Union[Setting, "Block"]]
    list: bool = False
    required: bool = False
    description: str = ""

    def to_json(self, name: str) -> Dict[str, Any]:
        out: Dict[str, Any] = {"name": name, "nesting": "list" if self.list else "single",
                               "spec": schema_json(self.settings)}
        if self.required:
            out["required"] = True
        if self.description:
            out["description"] = self.description
        return out


def schema_json(settings: Dict[str, Union[Setting, Block]]) -> Dict[str, Any]:
    """The schema.Spec JSON the host decodes the block against."""
    attrs, blocks = [], []
    for name, s in settings.items():
        if isinstance(s, Block):
            blocks.append(s.to_json(name))
        elif isinstance(s, Setting):
            attrs.append(s.to_json(name))
        else:
            raise TypeError(f"setting {name!r}: want Setting or Block, got {type(s).__name__}")
    out: Dict[str, Any] = {}
    if attrs:
        out["attributes"] = attrs
    if blocks:
        out["blocks"] = blocks
    return out


_SCALARS = {str: "string", int: "number", float: "number", bool: "bool", Any: "dynamic"}


def cty_type(t: Any) -> Any:
    """Converts a Python type annotation to go-cty's JSON type form."""
    if isinstance(t, (str, list)):
        return t  # already cty JSON
    if t in _SCALARS:
        return _SCALARS[t]
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin in (list, List, Sequence) and len(args) == 1:
        return ["list", cty_type(args[0])]
    if origin in (dict, Dict) and len(args) == 2 and args[0] is str:
        return ["map", cty_type(args[1])]
    raise TypeError(f"no HCL type for {t!r}: use str, int, float, bool, list[...], dict[str, ...] or a cty type")


# ---- sandbox results ---------------------------------------------------------


@dataclass
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    duration: float = 0.0  # seconds
    signal: str = ""
    oom_killed: bool = False
    pids_exceeded: bool = False
    cpu_time_exceeded: bool = False
    output_truncated: bool = False

    @property
    def ok(self) -> bool:
        """The command exited 0 and no limit fired."""
        return self.exit_code == 0 and not (self.timed_out or self.oom_killed or self.pids_exceeded
                                            or self.cpu_time_exceeded)

    @property
    def out(self) -> str:
        """stdout as text (invalid UTF-8 replaced)."""
        return self.stdout.decode(errors="replace")

    @property
    def err(self) -> str:
        return self.stderr.decode(errors="replace")

    @staticmethod
    def from_pb(r: pb.ExecResult) -> "ExecResult":
        return ExecResult(
            exit_code=r.exit_code, stdout=r.stdout, stderr=r.stderr, timed_out=r.timed_out,
            duration=r.duration_us / 1e6, signal=r.signal, oom_killed=r.oom_killed,
            pids_exceeded=r.pids_exceeded, cpu_time_exceeded=r.cpu_time_exceeded,
            output_truncated=r.output_truncated,
        )


@dataclass
class FileInfo:
    path: str
    size: int
    mode: int
    is_dir: bool
    mod_time: float  # Unix seconds

    @staticmethod
    def from_pb(f: pb.FileInfo) -> "FileInfo":
        return FileInfo(path=f.path.decode(errors="surrogateescape"), size=f.size, mode=f.mode,
                        is_dir=f.is_dir, mod_time=f.mod_time_unix_ms / 1e3)

