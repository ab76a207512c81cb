# Untrusted half of the MBPP grader (see grader.go for the design).
#
# Runs as `<python> -I -c <this>` in the solution's directory with a JSON job
# on stdin: it loads the solution, runs the test setup, evaluates the "hole"
# expressions the trusted grader asked for, and writes their values, encoded
# as plain data, to the original stdout. The agent's code runs in this
# process and could rewrite anything here; that is fine, because the trusted
# grader only trusts plain values, never a verdict.
import builtins
import json
import math
import os
import sys
import traceback

RESULT = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)  # the solution's prints go to stderr, not the result channel
JOB = json.loads(sys.stdin.read())
sys.stdin = open(os.devnull)
sys.dont_write_bytecode = True
SAVED = dict(builtins.__dict__)  # before the solution can change builtins
_type, _str, _repr = type, str, repr
PLAIN_SEQ = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}


class Unrepresentable(Exception):
    pass


def canon(v, depth=0):
    if depth > 150:
        raise Unrepresentable("value nested too deeply")
    t = _type(v)
    if v is None:
        return ["none"]
    if t is bool:
        return ["bool", v]
    if t is int:
        return ["int", _str(v)]
    if t is float:
        return ["float", v.hex()]
    if t is complex:
        return ["complex", v.real.hex(), v.imag.hex()]
    if t is str:
        return ["str", v]
    if t is bytes:
        return ["bytes", v.hex()]
    if t in PLAIN_SEQ:
        return [PLAIN_SEQ[t], [canon(x, depth + 1) for x in v]]
    if t is dict:
        return ["dict", [[canon(k, depth + 1), canon(x, depth + 1)] for k, x in v.items()]]
    raise Unrepresentable("%s.%s" % (t.__module__, t.__qualname__))


def failure(e):
    tb = e.__traceback__.tb_next if e.__traceback__ is not None else None  # drop this file's frame
    text = "".join(traceback.format_exception(type(e), e, tb))
    return {"err": "%s: %s" % (type(e).__name__, e), "tb": text[-3000:]}


REPORT = {"holes": []}


def finish():
    RESULT.write(json.dumps(REPORT))
    RESULT.flush()
    os._exit(0)  # skip atexit hooks the solution may have registered


sys.path.insert(0, JOB["dir"])
NS = {"__name__": "solution", "__file__": JOB["path"], "__builtins__": builtins}
try:
    exec(compile(JOB["source"], JOB["path"], "exec"), NS)
except BaseException as e:  # SystemExit too: exit() while importing is a failure
    REPORT["load"] = failure(e)
    finish()
for key in ("setup", "prelude"):
    try:
        exec(compile(JOB[key], "<test setup>", "exec"), NS)
    except BaseException as e:
        REPORT["setup"] = failure(e)
        finish()

# Test expressions mean the real builtins and math, whatever the solution bound.
ENV = dict(NS)
ENV.update({k: v for k, v in SAVED.items() if not k.startswith("__")})
ENV["math"] = math
ENV["__builtins__"] = SAVED
for src in JOB["holes"]:
    try:
        REPORT["holes"].append({"v": canon(eval(compile(src, "<test>", "eval"), ENV))})
    except Unrepresentable as e:
        REPORT["holes"].append({"bad": str(e)})
    except BaseException as e:
        REPORT["holes"].append(failure(e))
finish()
