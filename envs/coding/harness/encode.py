# Shared by the reference runner and the candidate child: a strict encoder of
# Python values into tagged JSON. Only exact built-in types are encoded, so an
# object that overrides __eq__ (or subclasses int) cannot pass as a correct
# answer; comparison happens outside the sandbox, in Go. Needs jsonlite.py.


def _encode(v, depth=0):
    if depth > 200:
        raise ValueError("value nested too deeply")
    t = type(v)
    if v is None:
        return ["none"]
    if t is bool:
        return ["bool", v]
    if t is int:
        return ["int", str(v)]
    if t is float:
        return ["float", repr(v)]
    if t is str:
        return ["str", v]
    if t is bytes:
        return ["bytes", v.hex()]
    if t is list or t is tuple:
        return [t.__name__, [_encode(x, depth + 1) for x in v]]
    if t is set or t is frozenset:
        items = [_encode(x, depth + 1) for x in v]
        items.sort(key=_dumps)
        return ["set", items]
    if t is dict:
        pairs = [[_encode(k, depth + 1), _encode(x, depth + 1)] for k, x in v.items()]
        pairs.sort(key=lambda kv: _dumps(kv[0]))
        return ["dict", pairs]
    return ["unsupported", str(getattr(t, "__name__", "?"))[:100]]


def _call_args(expr, builtins_mod):
    # A test input is written like the inside of a call: "[3, 1, 2]" or
    # "[1, 2], k=3". Evaluating it through a lambda keeps that syntax exact.
    return eval("(lambda *a, **k: (a, k))(" + expr + ")", {"__builtins__": builtins_mod})


def _describe(e, filename):
    # "Type: message (line N)", with N the last frame inside the given file.
    line = None
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    if isinstance(e, SyntaxError) and e.lineno:
        line = e.lineno
    msg = type(e).__name__
    try:
        text = str(e)
    except BaseException:
        text = "<unprintable>"
    if text:
        msg += ": " + text
    if line is not None:
        msg += " (line %d)" % line
    return msg[:1000]
