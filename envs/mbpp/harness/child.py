# Untrusted half of the MBPP grader (see grader.go for the design).
#
# Runs as `<python> -I -c <this>` in the solution's directory with a JSON job
# on stdin. For each test it forks a fresh process (in its own session, with
# a wall-clock limit) that loads the solution, runs the test setup, evaluates
# the "hole" expressions the trusted grader asked for, and reports their
# values encoded as plain data. The reports of all tests go to the original
# stdout as one JSON list. The agent's code runs only in the forked
# processes; it could still rewrite anything here, which is fine, because
# the trusted grader trusts plain values, never a verdict.
import builtins
import json
import linecache
import math
import os
import select
import signal
import sys
import time
import traceback

RESULT = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)  # stray prints go to stderr, never the result channel
JOB = json.loads(sys.stdin.read())
sys.stdin = open(os.devnull)
sys.dont_write_bytecode = True
SAVED = dict(builtins.__dict__)  # before any solution can change builtins
# Bound now, before any solution can rebind the builtins canon relies on.
_type, _issubclass, _repr = type, issubclass, repr
_int, _float, _str, _bytes, _dict = int, float, str, bytes, dict
_SEQS = ((list, "list"), (tuple, "tuple"), (set, "set"), (frozenset, "frozenset"))
MAX_REPORT = 8 << 20
STDERR_TAIL = 2000


class Unrepresentable(Exception):
    pass


# Values are reduced to the data their builtin base type stores, read with
# the base type's own methods: a subclass (Counter, OrderedDict, namedtuple,
# IntEnum, or one with a rigged __eq__) becomes the plain value it holds, so
# only data, never behaviour, reaches the trusted grader.
def canon(v, depth=0):
    if depth > 150:
        raise Unrepresentable("value nested too deeply")
    t = _type(v)  # the real type; __class__ can lie, type() cannot
    if v is None:
        return ["none"]
    if t is bool:
        return ["bool", v is True]
    if _issubclass(t, _int):
        return ["int", _int.__repr__(v)]
    if _issubclass(t, _float):
        return ["float", _float.hex(v)]
    if t is complex:
        return ["complex", v.real.hex(), v.imag.hex()]
    if _issubclass(t, _str):
        return ["str", _str.__str__(v)]
    if _issubclass(t, _bytes):
        return ["bytes", _bytes.hex(v)]
    for base, tag in _SEQS:
        if _issubclass(t, base):
            return [tag, [canon(x, depth + 1) for x in base.__iter__(v)]]
    if _issubclass(t, _dict):
        return ["dict", [[canon(k, depth + 1), canon(x, depth + 1)] for k, x in _dict.items(v)]]
    raise Unrepresentable("%s.%s" % (t.__module__, t.__qualname__))


def failure(e):
    try:
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None  # drop this file's frame
        text = "".join(traceback.format_exception(_type(e), e, tb))
        return {"err": "%s: %s" % (_type(e).__name__, e), "tb": text[-3000:]}
    except BaseException:  # the solution may have broken what formatting needs
        return {"err": "%s (no traceback available)" % _type(e).__name__}


def run_test(test):
    """Runs in the forked process: returns the report of one test."""
    sys.path.insert(0, JOB["dir"])
    # Tracebacks show the source that was graded, and never reopen the file
    # (which could be a FIFO by now).
    linecache.cache[JOB["path"]] = (len(JOB["source"]), None, JOB["source"].splitlines(True), JOB["path"])
    ns = {"__name__": "solution", "__file__": JOB["path"], "__builtins__": builtins}
    try:
        exec(compile(JOB["source"], JOB["path"], "exec"), ns)
    except BaseException as e:  # SystemExit too: exit() while importing is a failure
        return {"load": failure(e)}
    for code in (JOB["setup"], test["prelude"]):
        try:
            exec(compile(code, "<test setup>", "exec"), ns)
        except BaseException as e:
            return {"setup": failure(e)}
    # Test expressions mean the real builtins and math, whatever the solution bound.
    env = dict(ns)
    env.update({k: v for k, v in SAVED.items() if not k.startswith("__")})
    env["math"] = math
    env["__builtins__"] = SAVED
    holes = []
    for src in test["holes"]:
        try:
            holes.append({"v": canon(eval(compile(src, "<test>", "eval"), env))})
        except Unrepresentable as e:
            holes.append({"bad": str(e)})
        except BaseException as e:
            holes.append(failure(e))
    return {"holes": holes}


def fork_test(test):
    rr, rw = os.pipe()
    er, ew = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.close(rr)
            os.close(er)
            RESULT.close()
            os.dup2(ew, 1)
            os.dup2(ew, 2)
            rep = json.dumps(run_test(test)).encode()
            view = memoryview(rep)
            while view:
                view = view[os.write(rw, view):]
        finally:
            os._exit(0)  # skip atexit hooks the solution may have registered
    os.close(rw)
    os.close(ew)
    out, err = bytearray(), bytearray()
    open_fds = {rr: out, er: err}
    deadline = time.monotonic() + JOB["test_timeout"]
    exited, timed_out = False, False
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select(list(open_fds), [], [], min(left, 0.05))
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                os.close(fd)
                del open_fds[fd]
                continue
            buf = open_fds[fd]
            buf += chunk
            if fd == er and len(buf) > 2 * STDERR_TAIL:
                del buf[: len(buf) - STDERR_TAIL]
            if fd == rr and len(buf) > MAX_REPORT:
                os.close(fd)
                del open_fds[fd]
                out.clear()
        if exited:
            # The test process wrote everything before it exited; what is
            # still open is held by processes it left behind. Stop once the
            # pipes have nothing more to give right now.
            if not select.select(list(open_fds), [], [], 0)[0]:
                break
        elif os.waitpid(pid, os.WNOHANG)[0] == pid:
            exited = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    for fd in open_fds:
        os.close(fd)
    if not exited:
        os.waitpid(pid, 0)
    if timed_out:
        return {"none": "timed out after %gs" % JOB["test_timeout"]}
    try:
        return json.loads(bytes(out))
    except ValueError:
        note = "the test process ended without a result"
        tail = bytes(err[-STDERR_TAIL:]).decode("utf-8", "replace").strip()
        if tail:
            note += "\nstderr:\n" + tail
        return {"none": note}


RESULT.write(json.dumps([fork_test(t) for t in JOB["tests"]]))
RESULT.flush()
