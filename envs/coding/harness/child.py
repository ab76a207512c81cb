# Untrusted side: runs inside the process that executes the candidate's code.
# It talks to the runner over two private pipes (fds in argv); its own stdout
# and stderr are not the runner's, so printing cannot reach the verdict.
# Nothing here is trusted: it never sees the expected outputs, so the worst
# the candidate can do by tampering is claim values, which Go then checks.
import builtins
import json
import os
import sys


def _die_with_runner(runner_pid):
    # A backend that kills only the process it started (not its group)
    # would leave the candidate running; the kernel's parent-death signal
    # takes it down with the runner. Best effort: ctypes may be missing.
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    except Exception:
        pass
    if os.getppid() != runner_pid:  # the runner died before prctl
        os._exit(1)


def main():
    _die_with_runner(int(sys.argv[3]))
    rfile = open(int(sys.argv[1]), "rb")
    wfd = int(sys.argv[2])
    # Programs the candidate starts must not hold our pipes open, or the
    # runner could not tell that this process died.
    os.set_inheritable(rfile.fileno(), False)
    os.set_inheritable(wfd, False)
    dumps = json.dumps
    write = os.write

    def send(obj):
        data = (dumps(obj) + "\n").encode()
        while data:
            n = write(wfd, data)
            data = data[n:]

    req = json.loads(rfile.readline())
    cap = int(req["value_cap"])
    ns = {"__name__": "candidate", "__builtins__": builtins}
    try:
        exec(compile(req["code"], "<candidate>", "exec"), ns)
        fn = ns.get(req["func_name"])
        if not callable(fn):
            raise NameError("function %r is not defined" % req["func_name"])
    except BaseException as e:
        send({"ok": False, "error": _describe(e, "<candidate>")})
        return
    send({"ok": True})
    while True:
        line = rfile.readline()
        if not line:
            return
        expr = json.loads(line)["args"]
        try:
            a, k = _call_args(expr, builtins)
            value = _encode(fn(*a, **k))
            if len(dumps(value)) > cap:
                send({"ok": False, "too_large": True})
                continue
        except BaseException as e:
            send({"ok": False, "error": _describe(e, "<candidate>")})
            continue
        send({"ok": True, "value": value})


main()
