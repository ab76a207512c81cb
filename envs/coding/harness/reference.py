# Trusted: computes the expected outputs of a task before any candidate code
# has run in this sandbox. Input (stdin, JSON): reference, func_name, tests.
# Runs after jsonlite.py and encode.py.
# Output (stdout, one JSON line): {"values": [...], "path": sys.path} or
# {"error", "test"}. The path is what the candidate's process adds to the
# -I -S path of the runner it is forked from.
# With "compile" (the runner's source) in the input, the output also has
# "compiled", what compile.py prints: this interpreter compiles the runner
# here instead of starting once more for it.
import builtins
import marshal
import sys


def _reference_function(src, func_name):
    # An expression ("sorted", "lambda xs: ...") or a module defining func_name.
    try:
        code = compile(src, "<reference>", "eval")
    except SyntaxError:
        ns = {"__name__": "reference"}
        exec(compile(src, "<reference>", "exec"), ns)
        fn = ns.get(func_name)
        if not callable(fn):
            raise NameError("reference does not define a function %r" % func_name)
        return fn
    fn = eval(code, {"__name__": "reference"})
    if not callable(fn):
        raise TypeError("reference expression is not callable")
    return fn


def main():
    req = _loads(sys.stdin.buffer.read())
    compiled = None
    if req.get("compile") is not None:
        # Before the reference runs, so nothing it does can touch the code.
        # A failure only means the runner starts from its source.
        try:
            code = compile(req["compile"], "<runner>", "exec", dont_inherit=True)
            compiled = "%d %s" % (sys.hexversion, marshal.dumps(code).hex())
        except Exception:
            pass
    try:
        fn = _reference_function(req["reference"], req["func_name"])
    except BaseException as e:
        print(_dumps({"error": "reference: " + _describe(e, "<reference>"), "test": -1}))
        return
    values = []
    for i, expr in enumerate(req["tests"]):
        try:
            a, k = _call_args(expr, builtins)
            values.append(_encode(fn(*a, **k)))
        except BaseException as e:
            print(_dumps({"error": "test %d: %s" % (i, _describe(e, "<reference>")), "test": i}))
            return
    out = {"values": values, "path": sys.path}
    if compiled is not None:
        out["compiled"] = compiled
    print(_dumps(out))


main()
