#!/usr/bin/python3
"""Drive a fake ATCService with Python protobuf/gRPC modules.

  crosscheck.py client CLIENT_SRC ADDR KEY   the official client's generated
                                             modules (CLIENT_SRC/cwsandbox/_proto)
  crosscheck.py generated GEN_DIR ADDR KEY   modules protoc generated from the
                                             recovered .proto files

It loads only the generated modules (atc_pb2, secrets_pb2, atc_pb2_grpc),
never the rest of the client, and calls the service the way the client's
_sandbox.py does: bearer metadata, Start, Get until a stable state, Exec,
AddFile, RetrieveFile, List by tags, Stop, Delete. It prints one JSON object
of what it saw; the Go test checks it. Needs Debian's python3-grpcio and
python3-protobuf.
"""

import importlib.util
import json
import sys
import time
import types

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    parent, _, leaf = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], leaf, mod)
    return mod


def package(name):
    mod = types.ModuleType(name)
    mod.__path__ = []
    sys.modules[name] = mod
    parent, _, leaf = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], leaf, mod)
    return mod


def client_modules(src):
    # The client imports google.api's annotations only for their options;
    # Debian packages no Python googleapis protos, so empty files of those
    # names stand in (options stay unparsed bytes; the wire is unaffected).
    pool = descriptor_pool.Default()
    import google
    api = package("google.api")
    google.api = api
    for proto, mod in (("google/api/annotations.proto", "annotations_pb2"),
                       ("google/api/field_behavior.proto", "field_behavior_pb2")):
        pool.Add(descriptor_pb2.FileDescriptorProto(name=proto, package="google.api"))
        package("google.api." + mod)
    package("cwsandbox")
    package("cwsandbox._proto")
    d = src + "/cwsandbox/_proto/"
    load("cwsandbox._proto.secrets_pb2", d + "secrets_pb2.py")
    atc = load("cwsandbox._proto.atc_pb2", d + "atc_pb2.py")
    grpc_mod = load("cwsandbox._proto.atc_pb2_grpc", d + "atc_pb2_grpc.py")
    return atc, grpc_mod.ATCServiceStub


def generated_modules(gen):
    sys.path.insert(0, gen)
    from coreweave.aviato.v1beta1 import atc_pb2 as atc

    # protoc has no Python gRPC plugin in Debian: build the stub from the
    # service descriptor, as the generated *_grpc.py does by hand.
    svc = atc.DESCRIPTOR.services_by_name["ATCService"]

    class Stub:
        def __init__(self, channel):
            for m in svc.methods:
                req = getattr(atc, m.input_type.name)
                resp = getattr(atc, m.output_type.name)
                setattr(self, m.name, channel.unary_unary(
                    "/%s/%s" % (svc.full_name, m.name),
                    request_serializer=req.SerializeToString,
                    response_deserializer=resp.FromString))
    return atc, Stub


class Channel:
    """Drops the _registered_method keyword that stubs from grpcio-tools
    1.62+ pass and Debian's older grpcio does not take."""

    def __init__(self, ch):
        self.ch = ch

    def unary_unary(self, *a, **kw):
        kw.pop("_registered_method", None)
        return self.ch.unary_unary(*a, **kw)


def main():
    mode, where, addr, key = sys.argv[1:5]
    atc, Stub = client_modules(where) if mode == "client" else generated_modules(where)
    stub = Stub(Channel(grpc.insecure_channel(addr)))
    md = (("authorization", "Bearer " + key),)
    out = {}

    try:
        stub.List(atc.ListSandboxesRequest(), metadata=(("authorization", "Bearer wrong"),), timeout=10)
        out["bad_key"] = "OK"
    except grpc.RpcError as e:
        out["bad_key"] = e.code().name

    r = stub.Start(atc.StartSandboxRequest(
        command="/bin/sh", args=["-c", "sleep infinity"], container_image="python:3.11",
        tags=["crosscheck", "lang=py"], max_lifetime_seconds=600,
        environment_variables={"CROSS": "check"},
        resource_limits=atc.ResourceRequest(cpu="500m", memory="512Mi")), metadata=md, timeout=30)
    sid = r.sandbox_id
    out["start_status"] = atc.SandboxStatus.Name(r.sandbox_status)
    stable = (atc.SANDBOX_STATUS_RUNNING, atc.SANDBOX_STATUS_PAUSED, atc.SANDBOX_STATUS_COMPLETED,
              atc.SANDBOX_STATUS_FAILED, atc.SANDBOX_STATUS_TERMINATED, atc.SANDBOX_STATUS_UNSPECIFIED)
    seen, poll = [], 0.05
    for _ in range(600):
        g = stub.Get(atc.GetSandboxRequest(sandbox_id=sid), metadata=md, timeout=15)
        seen.append(atc.SandboxStatus.Name(g.sandbox_status))
        if g.sandbox_status in stable:
            break
        time.sleep(poll)
        poll = min(poll * 1.5, 0.5)
    out["polled"] = seen

    e = stub.Exec(atc.ExecSandboxRequest(sandbox_id=sid, command=["/bin/sh", "-c", 'echo "$CROSS"; echo oops >&2; exit 3'],
                                         max_timeout_seconds=30), metadata=md, timeout=35)
    out["exec"] = [e.result.stdout.decode(), e.result.stderr.decode(), e.result.exit_code]
    a = stub.AddFile(atc.AddFileSandboxRequest(sandbox_id=sid, filepath="/workspace/x/hello.txt",
                                               file_contents=b"hi\x00there", max_timeout_seconds=10), metadata=md, timeout=15)
    f = stub.RetrieveFile(atc.RetrieveFileSandboxRequest(sandbox_id=sid, filepath="/workspace/x/hello.txt",
                                                         max_timeout_seconds=10), metadata=md, timeout=15)
    out["file"] = [a.success, f.success, f.file_contents.hex()]
    missing = stub.RetrieveFile(atc.RetrieveFileSandboxRequest(sandbox_id=sid, filepath="/workspace/none"), metadata=md, timeout=15)
    out["missing_file_success"] = missing.success
    out["list_tagged"] = [s.sandbox_id == sid for s in stub.List(atc.ListSandboxesRequest(tags=["crosscheck"]), metadata=md, timeout=10).sandboxes]
    out["list_other"] = len(stub.List(atc.ListSandboxesRequest(tags=["crosscheck", "nope"]), metadata=md, timeout=10).sandboxes)
    s = stub.Stop(atc.StopSandboxRequest(sandbox_id=sid, graceful_shutdown_seconds=10, max_timeout_seconds=15), metadata=md, timeout=20)
    g = stub.Get(atc.GetSandboxRequest(sandbox_id=sid), metadata=md, timeout=15)
    out["stop"] = [s.success, atc.SandboxStatus.Name(g.sandbox_status)]
    d = stub.Delete(atc.DeleteSandboxRequest(sandbox_id=sid), metadata=md, timeout=15)
    try:
        stub.Get(atc.GetSandboxRequest(sandbox_id=sid), metadata=md, timeout=15)
        out["after_delete"] = "OK"
    except grpc.RpcError as err:
        out["after_delete"] = err.code().name
    out["delete"] = d.success
    print(json.dumps(out))


if __name__ == "__main__":
    main()
