# Untrusted side: what the candidate's process runs. The runner forks it
# before reading its request, so nothing of the episode (the nonce, the tests)
# is in this process's memory; it talks to the runner over two private pipes,
# and its stdin and stdout are /dev/null, so printing cannot reach the
# verdict. Nothing here is trusted: it never sees the expected outputs, so the
# worst the candidate can do by tampering is claim values, which Go then
# checks. Runs after jsonlite.py and encode.py.
import builtins
import posix
import sys


def _parent_death_signal():
    """Returns a function that makes the calling process die with its parent.

    A backend that kills only the process it started (not its group) would
    leave the candidate running; the kernel's parent-death signal takes it
    down with the runner. Best effort. The runner prepares this before it
    forks, so the child only makes the call. _ctypes is the C half of ctypes:
    importing the ctypes package would cost half an interpreter start."""
    try:
        import _ctypes

        class _Int(_ctypes._SimpleCData):
            _type_ = "i"

        class _Func(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = _Int

        prctl = _Func(_ctypes.dlsym(_ctypes.dlopen(None), "prctl"))
    except Exception:
        return lambda: None

    def set_signal():
        try:
            prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
        except Exception:
            pass

    return set_signal


def _check_builtins(snapshot):
    # The harness's own code runs on these builtins in this process, so a
    # candidate that rebinds one is tampering with the harness: they are put
    # back, and its load (or test) fails with an error naming the first.
    current = builtins.__dict__
    for name, obj in snapshot.items():
        if current.get(name, snapshot) is not obj:
            current.update(snapshot)
            raise RuntimeError("the candidate replaced the built-in %r" % name)


def _check_builtins_quietly(snapshot):
    # Before describing an exception the candidate raised, so that the
    # description runs on the real builtins.
    try:
        _check_builtins(snapshot)
    except RuntimeError:
        pass


def _child_main(rfd, wfd):
    rfile = open(rfd, "rb")
    dumps = _dumps
    write = posix.write

    def send(obj):
        data = (dumps(obj) + "\n").encode()
        while data:
            n = write(wfd, data)
            data = data[n:]

    req = _loads(rfile.readline())
    cap = int(req["value_cap"])
    sys.path.extend(p for p in req["path"] if p not in sys.path)
    ns = {"__name__": "candidate", "__builtins__": builtins}
    snapshot = dict(builtins.__dict__)
    try:
        exec(compile(req["code"], "<candidate>", "exec"), ns)
        fn = ns.get(req["func_name"])
        if not callable(fn):
            raise NameError("function %r is not defined" % req["func_name"])
        _check_builtins(snapshot)
    except BaseException as e:
        _check_builtins_quietly(snapshot)
        send({"ok": False, "error": _describe(e, "<candidate>")})
        return
    send({"ok": True})
    for expr in req["tests"]:
        try:
            a, k = _call_args(expr, builtins)
            value = _encode(fn(*a, **k))
            _check_builtins(snapshot)
            if len(dumps(value)) > cap:
                send({"ok": False, "too_large": True})
                continue
        except BaseException as e:
            _check_builtins_quietly(snapshot)
            send({"ok": False, "error": _describe(e, "<candidate>")})
            continue
        send({"ok": True, "value": value})
