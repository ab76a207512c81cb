# Trusted runner: checks the candidate's syntax without running it, starts the
# candidate in a child process, feeds it one test at a time under a deadline,
# and prints one verdict line prefixed with a per-episode nonce it read from
# stdin. The candidate never sees the nonce nor the runner's stdout, so lines
# it manages to print elsewhere are ignored by the host.
#
# Input (stdin, JSON): nonce, code, func_name, tests, budget (seconds),
# value_cap (bytes per encoded value), child (the child program source).
import json
import os
import select
import subprocess
import sys
import threading
import time


class _Timeout(Exception):
    pass


class _Crash(Exception):
    pass


class _TooLarge(Exception):
    pass


class _Lines:
    """Reads newline-terminated replies from fd under a deadline and a cap."""

    def __init__(self, fd, cap):
        self.fd = fd
        self.cap = cap
        self.buf = b""

    def next(self, deadline):
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 1:]
                return line
            if len(self.buf) > self.cap:
                raise _TooLarge()
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Timeout()
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                raise _Timeout()
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise _Crash()
            self.buf += chunk


def _drain(stream, keep, out):
    # Keeps the first `keep` bytes of the child's stderr and discards the
    # rest, so a flood can neither block the child nor fill our memory.
    while True:
        chunk = stream.read(1 << 16)
        if not chunk:
            return
        if len(out[0]) < keep:
            out[0] += chunk[: keep - len(out[0])]


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

    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-I", "-c", req["child"], str(req_r), str(resp_w), str(os.getpid())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        pass_fds=(req_r, resp_w),
        # The child stays in our process group: a backend that kills the
        # exec's group on timeout (or at sandbox destroy) then takes the
        # candidate and anything it spawned with it.
    )
    os.close(req_r)
    os.close(resp_w)
    stderr = [b""]
    drainer = threading.Thread(target=_drain, args=(child.stderr, 2000, stderr), daemon=True)
    drainer.start()
    value_cap = int(req["value_cap"])
    lines = _Lines(resp_r, value_cap + 4096)
    verdict = {"stage": "load"}
    try:
        verdict = _converse(req, req_w, lines, deadline)
    finally:
        child.kill()
        child.wait()
        drainer.join(0.1)
        os.close(req_w)
        os.close(resp_r)
    verdict["stderr"] = stderr[0].decode("utf-8", "replace")
    return verdict


def _send(fd, obj):
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def _reply(line):
    obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError("reply is not an object")
    return obj


def _converse(req, w, lines, deadline):
    try:
        _send(w, {"code": req["code"], "func_name": req["func_name"], "value_cap": req["value_cap"]})
        first = _reply(lines.next(deadline))
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
            _send(w, {"args": expr})
            reply = _reply(lines.next(deadline))
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
