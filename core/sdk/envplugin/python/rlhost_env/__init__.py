"""rlhost_env: write rlhost environment plugins in Python.

Subclass Env, describe the env block's settings, and call serve(MyEnv()) from
the script rlhost starts. See docs/python-env.md in the rlhost repository.
"""

import os as _os
import sys as _sys

if _os.environ.get("RLHOST_PLUGIN"):
    # Started by rlhost: the host logs plain stderr lines at debug level but
    # "[ERROR] " lines as errors, so an exception that kills a running
    # plugin is shown to the user. (One before the handshake, such as a
    # missing module, becomes the host's start-up error either way.)
    def _excepthook(tp, value, tb, _prev=_sys.excepthook):
        import traceback
        for line in "".join(traceback.format_exception(tp, value, tb)).splitlines():
            _sys.stderr.write("[ERROR] " + line + "\n")
        _sys.stderr.flush()

    _sys.excepthook = _excepthook

try:
    import grpc as _grpc  # noqa: F401
    import google.protobuf as _protobuf  # noqa: F401
except ImportError as _e:
    raise ImportError(
        f"rlhost_env needs the grpcio and protobuf packages in {_sys.executable} "
        "(Debian: apt-get install python3-grpcio python3-protobuf; or pip install grpcio protobuf), "
        "or set python = \"/path/to/python3\" in the env block"
    ) from _e

from .env import Config, Env, Episode
from .sandbox import Sandbox, SandboxError
from .server import serve
from .types import (
    FINISH_CANCELLED, FINISH_CONTEXT_LIMIT, FINISH_DONE, FINISH_ERROR, FINISH_MAX_TURNS, FINISH_PASSED,
    FINISH_TIMEOUT, FINISH_ATTEMPTS_EXHAUSTED, Block, ConfigError, Diagnostic, ExecResult, FileInfo, Message,
    Observation, Setting, Task, Tool, ToolCall, system, tool_result, user,
)

__version__ = "0.1.0"

__all__ = [
    "Block", "Config", "ConfigError", "Diagnostic", "Env", "Episode", "ExecResult", "FileInfo", "Message",
    "Observation", "Sandbox", "SandboxError", "Setting", "Task", "Tool", "ToolCall", "serve", "system",
    "tool_result", "user",
    "FINISH_ATTEMPTS_EXHAUSTED", "FINISH_CANCELLED", "FINISH_CONTEXT_LIMIT", "FINISH_DONE", "FINISH_ERROR",
    "FINISH_MAX_TURNS", "FINISH_PASSED", "FINISH_TIMEOUT",
]
