# Trusted half of the MBPP grader (see grader.go for the design).
#
# It runs as `<python> -I -S -` with this source on stdin, preceded by one
# line `JOB_B64 = "..."`. It never imports or executes agent code: it splits
# each test assertion into the sub-expressions that need the agent's code
# ("holes"), has an untrusted child process evaluate only those, receives
# their values as plain data, and evaluates the assertion itself. Verdicts go
# to stdout prefixed with a nonce that exists only here and in the env.
import ast
import binascii
import builtins
import json
import math
import os
import signal
import stat
import subprocess
import sys

JOB = json.loads(binascii.a2b_base64(JOB_B64))  # noqa: F821 (prepended by the env)
NONCE = JOB["nonce"]
OUT = sys.stdout
DETAIL_CAP = 4000
REPR_CAP = 300

# Names a test may use that always mean the real thing, evaluated here.
SAFE_MODULES = {"math": math}
SAFE_NAMES = set(dir(builtins)) | set(SAFE_MODULES)
CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def emit(obj):
    OUT.write(NONCE + " " + json.dumps(obj) + "\n")
    OUT.flush()


def cap(s, n):
    return s if len(s) <= n else s[: n // 2] + "\n[...]\n" + s[-n // 2 :]


def is_safe(node):
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id not in SAFE_NAMES:
            return False
    return True


def is_module_call(node):
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in SAFE_MODULES
    )


RECURSE = (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Starred)


def split(node, holes):
    """Replace the sub-expressions of node that need agent code by names
    _hole0, _hole1, ... and return the rewritten node; holes gets their
    source. Operators, displays and calls of safe modules are kept here, so
    their semantics cannot be changed by the agent's code."""
    if is_safe(node):
        return node
    if isinstance(node, RECURSE) or is_module_call(node):
        for field, value in ast.iter_fields(node):
            if field == "func":
                continue
            if isinstance(value, ast.expr):
                setattr(node, field, split(value, holes))
            elif isinstance(value, list):
                new = []
                for v in value:
                    if isinstance(v, ast.keyword):
                        v.value = split(v.value, holes)
                    elif isinstance(v, ast.expr):
                        v = split(v, holes)
                    new.append(v)
                setattr(node, field, new)
        return node
    name = "_hole%d" % len(holes)
    holes.append(ast.unparse(node))
    return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node)


def decode(c, depth=0):
    """Rebuild a plain value from the child's tagged encoding; anything else
    raises ValueError."""
    if depth > 200 or not isinstance(c, list) or not c or not isinstance(c[0], str):
        raise ValueError("malformed value")
    tag = c[0]
    if tag == "none" and len(c) == 1:
        return None
    if len(c) == 2:
        v = c[1]
        if tag == "bool" and type(v) is bool:
            return v
        if tag == "int" and type(v) is str:
            return int(v)
        if tag == "float" and type(v) is str:
            return float.fromhex(v)
        if tag == "str" and type(v) is str:
            return v
        if tag == "bytes" and type(v) is str:
            return bytes.fromhex(v)
        if tag in ("list", "tuple", "set", "frozenset") and type(v) is list:
            items = [decode(x, depth + 1) for x in v]
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
        if tag == "dict" and type(v) is list:
            out = {}
            for kv in v:
                if type(kv) is not list or len(kv) != 2:
                    raise ValueError("malformed dict item")
                out[decode(kv[0], depth + 1)] = decode(kv[1], depth + 1)
            return out
    if tag == "complex" and len(c) == 3 and type(c[1]) is str and type(c[2]) is str:
        return complex(float.fromhex(c[1]), float.fromhex(c[2]))
    raise ValueError("malformed value")


def run_children(source, setup, jobs):
    """Run the untrusted test server on all runnable tests at once; it forks
    one process per test. Return (list of per-test reports, or None, note)."""
    job = json.dumps(
        {"path": JOB["solution_path"], "dir": JOB["solution_dir"], "source": source,
         "setup": setup, "tests": jobs, "test_timeout": JOB["test_timeout"]}
    ).encode()
    try:
        p = subprocess.Popen(
            [sys.executable, "-I", "-c", JOB["child"]],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=JOB["solution_dir"], env=CHILD_ENV, start_new_session=True,
        )
    except OSError as e:
        return None, "could not start the test process: %s" % e
    timed_out = False
    try:
        out, err = p.communicate(job, timeout=len(jobs) * JOB["test_timeout"] + 5)
    except subprocess.TimeoutExpired:
        timed_out = True
        out, err = b"", b""
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    if timed_out:
        try:
            p.communicate(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        return None, "the tests timed out"
    try:
        rep = json.loads(out)
        if type(rep) is not list or len(rep) != len(jobs):
            raise ValueError("bad report")
    except ValueError:
        note = "the test process ended without a result (exit status %s)" % p.returncode
        tail = cap(err.decode("utf-8", "replace"), 1500)
        if tail.strip():
            note += "\nstderr:\n" + tail
        return None, note
    return rep, ""


def failure_of(err):
    if type(err) is not dict:
        return "malformed error report"
    return cap(str(err.get("tb") or err.get("err") or "error"), 2000)


def plan(test):
    """Parse one test entry: (prelude, checks, holes), or an error string."""
    try:
        tree = ast.parse(test)
    except SyntaxError as e:
        return "test does not parse: %s" % e
    prelude, checks, holes = [], [], []
    for st in tree.body:
        if isinstance(st, ast.Assert):
            src = ast.unparse(st)  # before split rewrites the tree
            first = len(holes)
            tmpl = split(st.test, holes)
            checks.append((src, tmpl, first, len(holes)))
        else:
            prelude.append(ast.unparse(st))
    if not checks:
        return "test has no assert statement; it cannot be graded"
    return "\n".join(prelude), checks, holes


def verdict(checks, holes, rep):
    """Evaluate one test's assertions on the values its process reported."""
    first = checks[0][0]
    if type(rep) is not dict:
        return False, "%s\n  malformed result" % first
    if rep.get("none"):
        return False, "%s\n  %s" % (first, cap(str(rep["none"]), 2000))
    for key, what in (("load", "importing the solution failed"), ("setup", "test setup failed")):
        if rep.get(key):
            return False, "%s\n  %s:\n%s" % (first, what, failure_of(rep[key]))
    got = rep.get("holes")
    if type(got) is not list or len(got) != len(holes):
        return False, "%s\n  the test process reported the wrong number of values" % first
    for src, tmpl, lo, hi in checks:
        env = {"__builtins__": builtins}
        env.update(SAFE_MODULES)
        shown = []
        for i in range(lo, hi):
            h = got[i]
            if type(h) is not dict:
                return False, "%s\n  malformed result" % src
            if "err" in h:
                return False, "%s\n  %s raised:\n%s" % (src, holes[i], failure_of(h))
            if "bad" in h:
                return False, "%s\n  %s returned a %s, which the grader cannot compare; return plain data (numbers, strings, lists, tuples, sets, dicts)" % (
                    src, holes[i], cap(str(h["bad"]), 100))
            try:
                v = decode(h.get("v"))
            except (ValueError, TypeError, OverflowError, RecursionError) as e:
                return False, "%s\n  malformed value for %s: %s" % (src, holes[i], e)
            env["_hole%d" % i] = v
            shown.append("  where %s = %s" % (cap(holes[i], 200), cap(repr(v), REPR_CAP)))
        try:
            ok = bool(eval(compile(ast.Expression(body=tmpl), "<test>", "eval"), env))
        except Exception as e:
            return False, "%s\n  evaluating the assertion raised %s: %s" % (src, type(e).__name__, cap(str(e), 500))
        if not ok:
            return False, "\n".join(["%s  # failed" % src] + shown)
    return True, ""


def read_solution():
    # O_NONBLOCK and the regular-file check: a FIFO or device planted as the
    # solution must not hang or flood the grader.
    try:
        fd = os.open(JOB["solution_path"], os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "raise SystemExit('the solution is not a regular file')\n"
        data = f.read(JOB["max_source"] + 1)
    if len(data) > JOB["max_source"]:
        return "raise SystemExit('solution file is larger than %d bytes')\n" % JOB["max_source"]
    return data.decode("utf-8", "replace")


def main():
    tests = JOB["tests"]
    results = [None] * len(tests)
    plans = []
    for i, test in enumerate(tests):
        try:
            pl = plan(test)
        except Exception as e:  # a bug here must fail the test, not pass it
            pl = "grader error: %s: %s" % (type(e).__name__, e)
        if isinstance(pl, str):
            results[i] = (False, pl)
        plans.append(pl)
    runnable = [i for i in range(len(tests)) if results[i] is None]
    source = read_solution()
    reports, note = None, ""
    if source is None:
        note = "no solution file at %s" % JOB["display_path"]
    elif runnable:
        jobs = [{"prelude": plans[i][0], "holes": plans[i][2]} for i in runnable]
        reports, note = run_children(source, JOB["setup"], jobs)
    for k, i in enumerate(runnable):
        checks, holes = plans[i][1], plans[i][2]
        if reports is None:
            results[i] = (False, "%s\n  %s" % (checks[0][0], note))
            continue
        try:
            results[i] = verdict(checks, holes, reports[k])
        except Exception as e:
            results[i] = (False, "grader error: %s: %s" % (type(e).__name__, e))
    passed = 0
    for i, (ok, detail) in enumerate(results):
        passed += bool(ok)
        emit({"i": i, "ok": bool(ok), "detail": cap(detail, DETAIL_CAP)})
    emit({"done": True, "passed": passed, "total": len(tests)})


main()
