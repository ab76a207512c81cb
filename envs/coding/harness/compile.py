# Compiles the runner's source (stdin) with this interpreter and prints
# its version and the marshalled code object in hex; loader.py runs it.
import marshal
import sys

_code = compile(sys.stdin.read(), "<runner>", "exec")
sys.stdout.write("%d %s" % (sys.hexversion, marshal.dumps(_code).hex()))
