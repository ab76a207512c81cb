# Trusted runner: forks the candidate's process first, while this process
# holds nothing of the episode; then reads its request from stdin, checks
# the candidate's syntax without running it, sends the child the code and
# every test in one message, reads its answers one by one under a deadline
# (so it can say which test hit it), and prints one verdict line prefixed with the
# per-episode nonce from the request. The child never holds the nonce nor
# the runner's stdout, so lines it manages to print elsewhere are ignored by
# the host.
#
# Runs with -I -S after jsonlite.py, encode.py and child.py, and imports
# nothing beyond the interpreter's core (posix, not os, which -S leaves
# unimported): its start-up is paid by every episode, and forking the child
# costs a fraction of starting a second interpreter.
#
# Input (stdin, JSON): nonce, code, func_name, tests, budget (seconds),
# value_cap (bytes per encoded value), path (directories the candidate gets
# on sys.path beyond the interpreter's own, as `python3 -I` would have them).
import gc
import posix
import select
import sys
import time

_STDERR_KEEP = 2000
_SIGKILL = 9  # the signal module imports enum, which costs milliseconds


class _Timeout(Exception):
    pass


class _Crash(Exception):
    pass


class _TooLarge(Exception):
    pass


class _Child:
    """The candidate's process, forked from this one. Its replies arrive on
    one pipe and its stderr on another; both are read in one select loop, so
    a stderr flood can neither block the child nor grow our memory. Its
    stdin and stdout are /dev/null, so nothing it prints reaches the
    verdict's stream and it cannot read the request."""

    def __init__(self):
        req_r, self.req_w = posix.pipe()
        self.resp_r, resp_w = posix.pipe()
        self.err_r, err_w = posix.pipe()
        devnull = posix.open("/dev/null", posix.O_RDWR)
        die_with_parent = _parent_death_signal()
        # Objects alive now are the runner's own: the child's collector
        # then never walks them, which would copy every page they sit on.
        gc.freeze()
        # The child stays in our process group: a backend that kills the
        # exec's group on timeout (or at sandbox destroy) then takes the
        # candidate and anything it spawned with it.
        self.pid = posix.fork()
        if self.pid == 0:
            _enter_child(req_r, resp_w, err_w, devnull, die_with_parent)
        for fd in (req_r, resp_w, err_w, devnull):
            posix.close(fd)
        self.buf = b""
        self.stderr = b""
        self.err_open = True
        self.cap = 0

    def send(self, obj):
        data = (_dumps(obj) + "\n").encode()
        while data:
            data = data[posix.write(self.req_w, data):]

    def _read_stderr(self):
        chunk = posix.read(self.err_r, 1 << 16)
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
                obj = _loads(line)
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
                chunk = posix.read(self.resp_r, 1 << 16)
                if not chunk:
                    raise _Crash()
                self.buf += chunk

    def close(self):
        try:
            posix.kill(self.pid, _SIGKILL)
        except ProcessLookupError:
            pass
        posix.waitpid(self.pid, 0)
        # Keep what stderr already holds, without waiting on anything the
        # candidate may have left holding the pipe.
        while self.err_open and select.select([self.err_r], [], [], 0)[0] and len(self.stderr) < _STDERR_KEEP:
            self._read_stderr()
        for fd in (self.req_w, self.resp_r, self.err_r):
            posix.close(fd)


def _enter_child(req_r, resp_w, err_w, devnull, die_with_parent):
    # In the forked child: nothing of the runner's may stay reachable (its
    # stdin still holds the unread request, its stdout is the verdict's
    # stream), then the candidate's side runs and the process ends without
    # unwinding into the runner's code. The exit is held in a local, which
    # the candidate cannot rebind as it can posix._exit.
    exit_now = posix._exit
    try:
        posix.dup2(devnull, 0)
        posix.dup2(devnull, 1)
        posix.dup2(err_w, 2)
        _close_fds_but(req_r, resp_w)
        die_with_parent()
        if posix.getppid() != _RUNNER_PID:  # the runner died before the signal was set
            exit_now(1)
        _child_main(req_r, resp_w)
    except BaseException:
        pass
    finally:
        exit_now(0)


def _close_fds_but(*keep):
    # closerange is one close_range(2) call where the kernel has it.
    low = 3
    for fd in sorted(keep):
        posix.closerange(low, fd)
        low = fd + 1
    posix.closerange(low, 1 << 20)


def _syntax_error(e):
    msg = type(e).__name__ + ": " + str(getattr(e, "msg", e))
    if getattr(e, "lineno", None):
        msg += " (line %d)" % e.lineno
    return msg[:1000]


def run(req, child, deadline):
    code = req["code"]
    try:
        compile(code, "<candidate>", "exec")
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as e:
        return {"stage": "syntax", "error": _syntax_error(e)}
    value_cap = int(req["value_cap"])
    child.cap = value_cap + 4096
    return _converse(req, child, deadline)


def _converse(req, child, deadline):
    try:
        # One message holds every test: the child answers each in turn
        # without waiting for the next, which saves a round trip (two
        # context switches) per test. The inputs are no secret; what
        # answers them is checked in Go.
        child.send({"code": req["code"], "func_name": req["func_name"], "value_cap": req["value_cap"],
                    "path": req.get("path") or [], "tests": req["tests"]})
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
            reply = child.reply(deadline)
        except _Timeout:
            results.append({"status": "timeout"})
            break
        except _Crash:
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
    child = _Child()
    try:
        req = _loads(sys.stdin.buffer.read())
        nonce = req["nonce"]
        verdict = run(req, child, start + float(req["budget"]))
    finally:
        child.close()
    verdict["stderr"] = child.stderr.decode("utf-8", "replace")
    sys.stdout.write(nonce + " " + _dumps(verdict) + "\n")
    sys.stdout.flush()
    # Nothing is left to clean up, and tearing the interpreter down costs
    # as much as a quarter of its start-up.
    posix._exit(0)


_RUNNER_PID = posix.getpid()
main()
