# JSON through the interpreter's C accelerator (_json), without importing the
# json package: its import (re, enum, functools) costs about half of what
# starting the interpreter does, and every scored completion paid it twice.
# Where _json is missing or differs, the json package is used instead.
def _jsonlite():
    try:
        import _json

        inf = float("inf")
        constants = {"NaN": inf - inf, "Infinity": inf, "-Infinity": -inf}

        class _Context:
            strict = True
            object_hook = None
            object_pairs_hook = None
            parse_float = float
            parse_int = int
            parse_constant = constants.__getitem__

        scan = _json.make_scanner(_Context())

        def default(o):
            raise TypeError("not JSON serializable: %s" % type(o).__name__)

        encode = _json.make_encoder(None, default, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True)

        def loads(data):
            if isinstance(data, (bytes, bytearray)):
                data = data.decode("utf-8")
            s = data.strip(" \t\r\n")
            try:
                obj, end = scan(s, 0)
            except StopIteration:
                raise ValueError("not JSON") from None
            if end != len(s):
                raise ValueError("extra data after JSON")
            return obj

        def dumps(obj):
            return "".join(encode(obj, 0))

        if loads(dumps([1, "a", {"b": None}])) != [1, "a", {"b": None}]:
            raise ValueError("_json misbehaves")
        return loads, dumps
    except Exception:
        import json

        return json.loads, json.dumps


_loads, _dumps = _jsonlite()
