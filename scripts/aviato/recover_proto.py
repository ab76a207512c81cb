#!/usr/bin/python3
"""Recover .proto definitions from the Aviato / CoreWeave Sandbox client.

The official Python client (github.com/coreweave/cwsandbox-client, formerly
aviato-client) ships protoc-generated modules under src/cwsandbox/_proto/.
Each *_pb2.py embeds its serialized FileDescriptorProto as a bytes literal
passed to AddSerializedFile. This script reads that literal with `ast` (it
never imports or runs the client's code), decodes it with the protobuf
library and prints it back as .proto source.

Custom options from google/api (HTTP annotations, field_behavior) are
dropped, and so is their import: they do not change the wire format, and
Debian has no Python package for googleapis' protos. Everything else (field
numbers, types, proto3 optional, oneofs, maps, enums, services, streaming)
is printed as declared.

After printing, it compiles the printed files with protoc and checks that
each descriptor equals the client's, less the dropped options, so a newer
client whose definitions the printer cannot express fails loudly.

Usage (Debian: apt-get install python3-protobuf protobuf-compiler):
  /usr/bin/python3 scripts/aviato/recover_proto.py CLIENT_CHECKOUT OUTDIR VERSION
e.g. with CLIENT_CHECKOUT holding a `git archive v0.16.0` of the client.
"""

import ast
import os
import subprocess
import sys
import tempfile

from google.protobuf import descriptor_pb2

F = descriptor_pb2.FieldDescriptorProto

SCALARS = {
    F.TYPE_DOUBLE: "double", F.TYPE_FLOAT: "float", F.TYPE_INT64: "int64",
    F.TYPE_UINT64: "uint64", F.TYPE_INT32: "int32", F.TYPE_FIXED64: "fixed64",
    F.TYPE_FIXED32: "fixed32", F.TYPE_BOOL: "bool", F.TYPE_STRING: "string",
    F.TYPE_BYTES: "bytes", F.TYPE_UINT32: "uint32", F.TYPE_SFIXED32: "sfixed32",
    F.TYPE_SFIXED64: "sfixed64", F.TYPE_SINT32: "sint32", F.TYPE_SINT64: "sint64",
}

DROPPED_IMPORTS = ("google/api/",)


def serialized_descriptor(path):
    """Return the bytes literal given to AddSerializedFile in a _pb2.py."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile" and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, bytes)):
            return node.args[0].value
    raise SystemExit(f"{path}: no AddSerializedFile(b'...') call found")


def type_name(field, package):
    if field.type in (F.TYPE_MESSAGE, F.TYPE_ENUM):
        name = field.type_name
        prefix = "." + package + "."
        if name.startswith(prefix):
            return name[len(prefix):]
        return name.lstrip(".")
    return SCALARS[field.type]


class Printer:
    def __init__(self, fd):
        self.fd = fd
        self.out = []

    def line(self, depth, text=""):
        self.out.append(("  " * depth + text) if text else "")

    def enum(self, e, depth):
        self.line(depth, f"enum {e.name} {{")
        for v in e.value:
            self.line(depth + 1, f"{v.name} = {v.number};")
        self.line(depth, "}")

    def field(self, f, msg, depth, maps):
        label = ""
        if f.label == F.LABEL_REPEATED:
            label = "repeated "
        elif f.proto3_optional:
            label = "optional "
        opts = " [packed = false]" if f.options.HasField("packed") and not f.options.packed else ""
        if f.options.deprecated:
            opts = " [deprecated = true]"
        entry = maps.get(f.type_name)
        if entry is not None:
            k, v = entry.field[0], entry.field[1]
            self.line(depth, f"map<{type_name(k, self.fd.package)}, {type_name(v, self.fd.package)}> {f.name} = {f.number}{opts};")
            return
        self.line(depth, f"{label}{type_name(f, self.fd.package)} {f.name} = {f.number}{opts};")

    def message(self, m, depth, scope):
        full = f"{scope}.{m.name}"
        self.line(depth, f"message {m.name} {{")
        maps = {}
        for n in m.nested_type:
            if n.options.map_entry:
                maps[f"{full}.{n.name}"] = n
        for e in m.enum_type:
            self.enum(e, depth + 1)
        for n in m.nested_type:
            if not n.options.map_entry:
                self.message(n, depth + 1, full)
        # Real oneofs group their fields; synthetic ones (proto3 optional) do not.
        real_oneofs = {}
        for f in m.field:
            if f.HasField("oneof_index") and not f.proto3_optional:
                real_oneofs.setdefault(f.oneof_index, []).append(f)
        printed = set()
        for f in m.field:
            if f.HasField("oneof_index") and not f.proto3_optional:
                if f.oneof_index in printed:
                    continue
                printed.add(f.oneof_index)
                self.line(depth + 1, f"oneof {m.oneof_decl[f.oneof_index].name} {{")
                for g in real_oneofs[f.oneof_index]:
                    self.field(g, m, depth + 2, maps)
                self.line(depth + 1, "}")
                continue
            self.field(f, m, depth + 1, maps)
        for r in m.reserved_range:
            end = r.end - 1
            self.line(depth + 1, f"reserved {r.start};" if end == r.start else f"reserved {r.start} to {end};")
        for name in m.reserved_name:
            self.line(depth + 1, f'reserved "{name}";')
        self.line(depth, "}")

    def service(self, s):
        self.line(0, f"service {s.name} {{")
        pkg = self.fd.package
        for m in s.method:
            cs = "stream " if m.client_streaming else ""
            ss = "stream " if m.server_streaming else ""
            it = type_name(F(type=F.TYPE_MESSAGE, type_name=m.input_type), pkg)
            ot = type_name(F(type=F.TYPE_MESSAGE, type_name=m.output_type), pkg)
            self.line(1, f"rpc {m.name}({cs}{it}) returns ({ss}{ot});")
        self.line(0, "}")

    def render(self, header):
        fd = self.fd
        for h in header:
            self.line(0, "// " + h if h else "//")
        self.line(0)
        self.line(0, f'syntax = "{fd.syntax or "proto2"}";')
        self.line(0)
        self.line(0, f"package {fd.package};")
        self.line(0)
        deps = [d for d in fd.dependency if not d.startswith(DROPPED_IMPORTS)]
        for d in deps:
            self.line(0, f'import "{d}";')
        if deps:
            self.line(0)
        for e in fd.enum_type:
            self.enum(e, 0)
            self.line(0)
        for m in fd.message_type:
            self.message(m, 0, "." + fd.package)
            self.line(0)
        for s in fd.service:
            self.service(s)
            self.line(0)
        return "\n".join(self.out).rstrip() + "\n"


def strip(fd):
    """The client's descriptor less what the printer drops on purpose."""
    fd = descriptor_pb2.FileDescriptorProto.FromString(fd.SerializeToString())
    keep = [d for d in fd.dependency if not d.startswith(DROPPED_IMPORTS)]
    del fd.dependency[:]
    fd.dependency.extend(keep)
    fd.ClearField("options")

    def fields(fs):
        for f in fs:
            packed = f.options.packed if f.options.HasField("packed") else None
            deprecated = f.options.deprecated
            f.ClearField("options")
            if packed is False:
                f.options.packed = False
            if deprecated:
                f.options.deprecated = True
            f.ClearField("json_name")

    def messages(ms):
        for m in ms:
            entry = m.options.map_entry
            m.ClearField("options")
            if entry:
                m.options.map_entry = True
            fields(m.field)
            for o in m.oneof_decl:
                o.ClearField("options")
            for e in m.enum_type:
                e.ClearField("options")
                for v in e.value:
                    v.ClearField("options")
            messages(m.nested_type)

    messages(fd.message_type)
    for e in fd.enum_type:
        e.ClearField("options")
        for v in e.value:
            v.ClearField("options")
    for s in fd.service:
        s.ClearField("options")
        for m in s.method:
            m.ClearField("options")
    fd.ClearField("source_code_info")
    return fd


def verify(outdir, originals):
    """Compile the printed files with protoc and compare them, descriptor by
    descriptor, with the client's (less the dropped options)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "set.pb")
        subprocess.run(["protoc", "-I", outdir, "--descriptor_set_out=" + out] + [fd.name for fd in originals], check=True)
        with open(out, "rb") as f:
            got = {fd.name: fd for fd in descriptor_pb2.FileDescriptorSet.FromString(f.read()).file}
    bad = []
    for fd in originals:
        g = strip(got[fd.name])
        if g.SerializeToString(deterministic=True) != strip(fd).SerializeToString(deterministic=True):
            bad.append(fd.name)
    if bad:
        raise SystemExit("recovered .proto differs from the client's descriptor: " + ", ".join(bad))
    print("verified with protoc: %d files match the client's descriptors" % len(originals))


def main(argv):
    if len(argv) != 4:
        raise SystemExit(__doc__)
    checkout, outdir, version = argv[1:]
    protodir = os.path.join(checkout, "src", "cwsandbox", "_proto")
    names = sorted(n for n in os.listdir(protodir) if n.endswith("_pb2.py"))
    if not names:
        raise SystemExit(f"{protodir}: no *_pb2.py modules")
    originals = []
    for n in names:
        fd = descriptor_pb2.FileDescriptorProto.FromString(serialized_descriptor(os.path.join(protodir, n)))
        originals.append(fd)
        header = [
            f"Recovered from {n} of github.com/coreweave/cwsandbox-client {version}",
            "by scripts/aviato/recover_proto.py: the client's embedded FileDescriptorProto",
            "printed back as .proto. google.api options (HTTP annotations,",
            "field_behavior) are dropped; they do not affect the wire format.",
            "The API belongs to CoreWeave; this file only restates its definitions.",
        ]
        path = os.path.join(outdir, fd.name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(Printer(fd).render(header))
        print(path)
    verify(outdir, originals)


if __name__ == "__main__":
    main(sys.argv)
