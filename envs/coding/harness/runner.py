# Trusted runner: checks the candidate's syntax without running it, starts the
# candidate in a child process, feeds it one test at a time under a deadline,
# and prints one verdict line prefixed with a per-episode nonce it read from
# stdin. The candidate never sees the nonce nor the runner's stdout, so lines
# it manages to print elsewhere are ignored by the host.
#
# Run with -I -S and no imports beyond the interpreter's core, because its
# start-up time is paid by every episode.
#
# Input (stdin, JSON): nonce, code, func_name, tests, budget (seconds),
# value_cap (bytes per encoded value), child (the child program source).
import json
import os
import select
import signal
import sys
import time

_STDERR_KEEP = 2000


class _Timeout(Exception):
    pass


class _Crash(Exception):
    pass


class _TooLarge(Exception):
    pass


class _Child:
    """The candidate's process. Its replies arrive on one pipe and its
    stderr on another; both are read in one select loop, so a stderr flood
    can neither block the child nor grow our memory. Its stdout is
    /dev/null, so nothing it prints reaches the verdict's stream."""

    def __init__(self, source, cap):
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        self.err_r, err_w = os.pipe()
        os.set_inheritable(req_r, True)
        os.set_inheritable(resp_w, True)
        devnull = os.open(os.devnull, os.O_RDWR)
        argv = [sys.executable, "-I", "-c", source, str(req_r), str(resp_w), str(os.getpid())]
        # The child stays in our process group: a backend that kills the
        # exec's group on timeout (or at sandbox destroy) then takes the
        # candidate and anything it spawned with it.
        self.pid = os.posix_spawn(sys.executable, argv, os.environ, file_actions=[
            (os.POSIX_SPAWN_DUP2, devnull, 0),
            (os.POSIX_SPAWN_DUP2, devnull, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ])
        for fd in (req_r, resp_w, err_w, devnull):
            os.close(fd)
        self.cap = cap
        self.buf = b""
        self.stderr = b""
        self.err_open = True

    def send(self, obj):
        data = (json.dumps(obj) + "\n").encode()
        while data:
            data = data[os.write(self.req_w, data):]

    def _read_stderr(self):
        chunk = os.read(self.err_r, 1 << 16)
        if not chunk:
            self.err_open = False
        elif len(self.stderr) < _STDERR_KEEP:
            self.stderr += chunk[: _STDERR_KEEP - len(self.stderr)]

    def reply(self, deadline):
        """Returns the next reply object, read under the deadline and cap."""
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 1:]
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError("reply is not an object")
                return obj
            if len(self.buf) > self.cap:
                raise _TooLarge()
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Timeout()
            fds = [self.resp_r, self.err_r] if self.err_open else [self.resp_r]
            ready, _, _ = select.select(fds, [], [], left)
            if not ready:
                raise _Timeout()
            if self.err_r in ready:
                self._read_stderr()
            if self.resp_r in ready:
                chunk = os.read(self.resp_r, 1 << 16)
                if not chunk:
                    raise _Crash()
                self.buf += chunk

    def close(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        # Keep what stderr already holds, without waiting on anything the
        # candidate may have left holding the pipe.
        while self.err_open and select.select([self.err_r], [], [], 0)[0] and len(self.stderr) < _STDERR_KEEP:
            self._read_stderr()
        for fd in (self.req_w, self.resp_r, self.err_r):
            os.close(fd)


def _syntax_error(e):
    msg = type(e).__name__ + ": " + str(getattr(e, "msg", e))
    if getattr(e, "lineno", None):
        msg += " (line %d)" % e.lineno
    return msg[:1000]


def run(req, deadline):
    code = req["code"]
    try:
        compile(code, "<candidate>", "exec")
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as e:
        return {"stage": "syntax", "error": _syntax_error(e)}
    value_cap = int(req["value_cap"])
    child = _Child(req["child"], value_cap + 4096)
    try:
        verdict = _converse(req, child, deadline)
    finally:
        child.close()
    verdict["stderr"] = child.stderr.decode("utf-8", "replace")
    return verdict


def _converse(req, child, deadline):
    try:
        child.send({"code": req["code"], "func_name": req["func_name"], "value_cap": req["value_cap"]})
        first = child.reply(deadline)
    except _Timeout:
        return {"stage": "load", "status": "timeout"}
    except (_Crash, BrokenPipeError):
        return {"stage": "load", "status": "crash", "error": "candidate process exited while loading"}
    except (_TooLarge, ValueError):
        return {"stage": "load", "status": "crash", "error": "malformed reply while loading"}
    if first.get("ok") is not True:
        return {"stage": "load", "status": "error", "error": str(first.get("error", ""))[:1000]}

    results = []
    tests = req["tests"]
    for i, expr in enumerate(tests):
        try:
            child.send({"args": expr})
            reply = child.reply(deadline)
        except _Timeout:
            results.append({"status": "timeout"})
            break
        except (_Crash, BrokenPipeError):
            results.append({"status": "crash", "error": "candidate process exited during test %d" % i})
            break
        except _TooLarge:
            results.append({"status": "too_large"})
            break
        except ValueError:
            results.append({"status": "bad_reply"})
            break
        if reply.get("ok") is True and "value" in reply:
            results.append({"status": "ok", "value": reply["value"]})
        elif reply.get("too_large"):
            results.append({"status": "too_large"})
        else:
            results.append({"status": "error", "error": str(reply.get("error", ""))[:1000]})
    while len(results) < len(tests):
        results.append({"status": "not_run"})
    return {"stage": "tests", "results": results}


def main():
    start = time.monotonic()
    req = json.loads(sys.stdin.buffer.read())
    nonce = req["nonce"]
    verdict = run(req, start + float(req["budget"]))
    sys.stdout.write(nonce + " " + json.dumps(verdict) + "\n")
    sys.stdout.flush()


main()
