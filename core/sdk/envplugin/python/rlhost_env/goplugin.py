"""The plugin side of hashicorp/go-plugin's gRPC protocol, in Python.

This module knows nothing about rlhost's services: it checks the magic
cookie, serves the services every go-plugin plugin must serve (health,
controller, stdio, broker) next to the application's own, prints the
handshake line, and exits cleanly when the host asks or dies. rlhost_env.server
builds the environment service on top of it.

What go-plugin requires of a plugin, and where it is done here:

* the host sets the magic cookie variable; without it the plugin was run by
  hand and must say so and exit (``check_cookie``);
* ``PLUGIN_PROTOCOL_VERSIONS`` lists the app protocol versions the host
  speaks; the plugin picks one and reports it in the handshake;
* the plugin listens (here: a Unix socket in ``PLUGIN_UNIX_SOCKET_DIR`` or
  the temp dir) and prints one line on stdout,
  ``CORE|APP|unix|ADDRESS|grpc[|CERT]``, then never writes to that stdout
  again (its later output goes over plugin.GRPCStdio);
* grpc.health.v1.Health reports "plugin" as SERVING;
* plugin.GRPCController/Shutdown stops the plugin;
* plugin.GRPCBroker/StartStream is a stream on which the host sends a
  ConnInfo (id, network, address) for each server it offers; the plugin
  dials the address to use it;
* with AutoMTLS the host passes its certificate in ``PLUGIN_CLIENT_CERT``;
  the plugin must then serve TLS with a certificate of its own, report it in
  the handshake, and present it when dialling the broker.
"""

from __future__ import annotations

import base64
import datetime
import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from concurrent import futures
from typing import Callable, Iterable, Optional, Sequence

import grpc

from ._pb import goplugin_pb2 as gp

CORE_PROTOCOL_VERSION = 1

# One gRPC message between host and plugin may hold a whole file or program
# output; rlhost's host allows 256 MiB, and so do we.
MAX_MESSAGE_BYTES = 256 << 20

GRPC_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]

# How long Dial waits for the host to announce a brokered server; the Go
# broker uses the same 5 s.
BROKER_DIAL_TIMEOUT = 5.0

# How often the main thread checks that its parent (the host) is still there.
PARENT_POLL_SECONDS = 0.25


class PluginError(Exception):
    """The plugin cannot start: the host asked for something it cannot do."""


# ---- logging ---------------------------------------------------------------


class HCLogHandler(logging.Handler):
    """Writes records as hclog JSON lines, which go-plugin's host parses and
    re-logs at their level under the plugin's name. Write errors (the host is
    gone and stderr is a broken pipe) are swallowed."""

    def __init__(self, stream=None):
        super().__init__()
        self._stream = stream or sys.stderr

    def emit(self, record: logging.LogRecord) -> None:
        try:
            entry = {
                "@level": _hclog_level(record.levelno),
                "@message": record.getMessage(),
                "@module": record.name,
                "@timestamp": datetime.datetime.now(datetime.timezone.utc)
                .astimezone()
                .isoformat(timespec="microseconds"),
            }
            if record.exc_info:
                entry["error"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
            self._stream.write(json.dumps(entry) + "\n")
            self._stream.flush()
        except Exception:  # noqa: BLE001 - a log line must never raise
            pass


def _hclog_level(levelno: int) -> str:
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warn"
    if levelno >= logging.INFO:
        return "info"
    if levelno >= logging.DEBUG:
        return "debug"
    return "trace"


# ---- broker ----------------------------------------------------------------


class Broker:
    """The plugin side of go-plugin's GRPCBroker: it records the ConnInfo the
    host announces on the StartStream stream and dials them by id."""

    def __init__(self, credentials: Optional[grpc.ChannelCredentials] = None):
        self._cond = threading.Condition()
        self._infos: dict[int, gp.ConnInfo] = {}
        self._closed = False
        self._credentials = credentials
        self._log = logging.getLogger("rlhost_env.broker")

    def start_stream(self, requests: Iterable[gp.ConnInfo], context) -> Iterable[gp.ConnInfo]:
        """plugin.GRPCBroker/StartStream. The plugin never offers servers of
        its own, so it only reads; the stream lives as long as the host keeps
        it open."""
        try:
            for info in requests:
                if info.HasField("knock"):
                    # Knocks only come with broker multiplexing, which this
                    # plugin does not announce in its handshake.
                    self._log.warning("ignoring broker knock for id %d", info.service_id)
                    continue
                with self._cond:
                    self._infos[info.service_id] = info
                    self._cond.notify_all()
        except grpc.RpcError:
            pass  # the host closed the stream
        return iter(())

    def dial(self, service_id: int, timeout: float = BROKER_DIAL_TIMEOUT) -> grpc.Channel:
        """Returns a channel to the server the host announced under
        service_id, waiting up to timeout for the announcement."""
        with self._cond:
            ok = self._cond.wait_for(lambda: service_id in self._infos or self._closed, timeout)
            if self._closed:
                raise PluginError("broker closed")
            if not ok:
                raise TimeoutError(f"timeout waiting for the host to announce broker connection {service_id}")
            info = self._infos.pop(service_id)
        if info.network == "unix":
            target = "unix:" + info.address
        elif info.network == "tcp":
            target = info.address
        else:
            raise PluginError(f"broker connection {service_id}: unknown network {info.network!r}")
        if self._credentials is not None:
            # The host's AutoMTLS certificate is issued for "localhost".
            opts = GRPC_OPTIONS + [("grpc.ssl_target_name_override", "localhost")]
            return grpc.secure_channel(target, self._credentials, options=opts)
        return grpc.insecure_channel(target, options=GRPC_OPTIONS)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


# ---- stdio -----------------------------------------------------------------


class _Stdio:
    """Replaces fd 1 with a pipe once the handshake is printed, and streams
    what is written there over plugin.GRPCStdio, as go-plugin does for Go
    plugins. Until a reader subscribes, output is kept in a bounded queue."""

    def __init__(self):
        self._q: "queue.Queue[Optional[bytes]]" = queue.Queue(maxsize=1024)

    def redirect_stdout(self) -> None:
        sys.stdout.flush()
        r, w = os.pipe()
        os.dup2(w, 1)
        os.close(w)
        threading.Thread(target=self._pump, args=(r,), name="rlhost-stdio", daemon=True).start()

    def _pump(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 64 << 10)
            except OSError:
                return
            if not data:
                return
            try:
                self._q.put_nowait(data)
            except queue.Full:
                pass  # nobody reads; dropping beats blocking the author's print()

    def stream(self, _request, context) -> Iterable[gp.StdioData]:
        """plugin.GRPCStdio/StreamStdio."""
        while context.is_active():
            try:
                data = self._q.get(timeout=0.5)
            except queue.Empty:
                continue
            if data is None:
                return
            yield gp.StdioData(channel=gp.StdioData.STDOUT, data=data)

    def close(self) -> None:
        try:
            self._q.put_nowait(None)
        except queue.Full:
            pass


# ---- AutoMTLS --------------------------------------------------------------


def _auto_mtls(client_cert_pem: str, workdir: str):
    """Makes a self-signed certificate the way go-plugin's generateCert does
    (ECDSA P-256, CN and SAN localhost, usable for client and server auth),
    with the openssl command, since Python's standard library cannot. Returns
    server credentials, channel credentials for broker dials, and the
    certificate as base64 DER for the handshake."""
    if shutil.which("openssl") is None:
        raise PluginError("the host enabled AutoMTLS but the openssl command is not installed")
    key = os.path.join(workdir, "key.pem")
    crt = os.path.join(workdir, "cert.pem")
    cmd = [
        "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", key, "-out", crt, "-days", "30", "-subj", "/O=HashiCorp/CN=localhost",
        "-addext", "subjectAltName=DNS:localhost",
        "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyAgreement,keyCertSign",
        "-addext", "extendedKeyUsage=clientAuth,serverAuth",
        "-addext", "basicConstraints=critical,CA:TRUE",
    ]
    res = subprocess.run(cmd, capture_output=True)
    if res.returncode != 0:
        raise PluginError("make AutoMTLS certificate: " + res.stderr.decode(errors="replace").strip())
    der = subprocess.run(["openssl", "x509", "-in", crt, "-outform", "DER"], capture_output=True, check=True).stdout
    with open(key, "rb") as f:
        key_pem = f.read()
    with open(crt, "rb") as f:
        cert_pem = f.read()
    host = client_cert_pem.encode()
    server = grpc.ssl_server_credentials([(key_pem, cert_pem)], root_certificates=host, require_client_auth=True)
    channel = grpc.ssl_channel_credentials(root_certificates=host, private_key=key_pem, certificate_chain=cert_pem)
    # go-plugin decodes the handshake certificate with base64.RawStdEncoding.
    return server, channel, base64.b64encode(der).decode().rstrip("=")


# ---- serving ---------------------------------------------------------------


def _unary(fn, req_cls, resp_cls):
    return grpc.unary_unary_rpc_method_handler(
        fn, request_deserializer=req_cls.FromString, response_serializer=resp_cls.SerializeToString
    )


class Plugin:
    """One go-plugin plugin process.

    services(broker) returns the application's gRPC handlers; on_stop runs
    once before the process exits, whether the host asked (Shutdown) or died.
    """

    def __init__(
        self,
        *,
        cookie_key: str,
        cookie_value: str,
        app_version: int,
        services: Callable[[Broker], Sequence[grpc.GenericRpcHandler]],
        on_stop: Optional[Callable[[str], None]] = None,
        max_workers: int = 64,
    ):
        self.cookie_key = cookie_key
        self.cookie_value = cookie_value
        self.app_version = app_version
        self._services = services
        self._on_stop = on_stop
        self._max_workers = max_workers
        self._stop = threading.Event()
        self._stop_reason = ""
        self._stop_once = threading.Lock()
        self._log = logging.getLogger("rlhost_env.plugin")

    def check_cookie(self) -> None:
        if os.environ.get(self.cookie_key) != self.cookie_value:
            sys.stderr.write(
                "This is an rlhost plugin. It is meant to be started by rlhost, not run\n"
                "directly: name it in a job file's env block (plugin = \"./this-file\").\n"
            )
            sys.exit(1)

    def _negotiate(self) -> int:
        offered = os.environ.get("PLUGIN_PROTOCOL_VERSIONS", "")
        if not offered:
            return self.app_version
        versions = {int(v) for v in offered.split(",") if v.strip().isdigit()}
        if self.app_version not in versions:
            raise PluginError(
                f"the host speaks plugin protocol versions {sorted(versions)}, this plugin speaks {self.app_version}"
            )
        return self.app_version

    def request_stop(self, reason: str) -> None:
        """Makes serve() stop the plugin and exit. Safe from any thread."""
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop.set()

    def serve(self) -> None:
        """Runs the plugin until the host shuts it down or dies; never
        returns (the process exits)."""
        self.check_cookie()
        version = self._negotiate()
        workdir = tempfile.mkdtemp(prefix="plugin", dir=os.environ.get("PLUGIN_UNIX_SOCKET_DIR") or None)
        sock = os.path.join(workdir, "grpc.sock")

        server_creds = channel_creds = None
        cert = ""
        if os.environ.get("PLUGIN_CLIENT_CERT"):
            server_creds, channel_creds, cert = _auto_mtls(os.environ["PLUGIN_CLIENT_CERT"], workdir)

        broker = Broker(channel_creds)
        stdio = _Stdio()
        handlers = [
            grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
                "Check": _unary(self._health, gp.HealthCheckRequest, gp.HealthCheckResponse),
            }),
            grpc.method_handlers_generic_handler("plugin.GRPCController", {
                "Shutdown": _unary(self._controller_shutdown, gp.Empty, gp.Empty),
            }),
            grpc.method_handlers_generic_handler("plugin.GRPCStdio", {
                "StreamStdio": grpc.unary_stream_rpc_method_handler(
                    stdio.stream, request_deserializer=gp.Empty.FromString,
                    response_serializer=gp.StdioData.SerializeToString),
            }),
            grpc.method_handlers_generic_handler("plugin.GRPCBroker", {
                "StartStream": grpc.stream_stream_rpc_method_handler(
                    broker.start_stream, request_deserializer=gp.ConnInfo.FromString,
                    response_serializer=gp.ConnInfo.SerializeToString),
            }),
        ]
        handlers.extend(self._services(broker))
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="rlhost-rpc"),
            handlers=handlers, options=GRPC_OPTIONS,
        )
        if server_creds is not None:
            server.add_secure_port("unix:" + sock, server_creds)
        else:
            server.add_insecure_port("unix:" + sock)

        # A terminal's Ctrl-C reaches the whole process group; the host shuts
        # its plugins down in order, so the plugin must not die first. (A
        # handler, not SIG_IGN: an ignored signal is inherited by children.)
        signal.signal(signal.SIGINT, lambda *_: None)
        # The host starts plugins with a parent-death SIGTERM.
        signal.signal(signal.SIGTERM, lambda *_: self.request_stop("SIGTERM"))
        parent = os.getppid()

        server.start()
        # From here on the process must end through os._exit below: a normal
        # interpreter exit would wait forever for gRPC's worker threads.
        try:
            line = f"{CORE_PROTOCOL_VERSION}|{version}|unix|{sock}|grpc"
            if cert:
                line += "|" + cert
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
            stdio.redirect_stdout()

            # The main thread waits here so that signals are handled
            # promptly, and it doubles as the parent watch: SIGTERM can be
            # lost when the host's forking thread exits before the host does.
            while not self._stop.wait(PARENT_POLL_SECONDS):
                if os.getppid() != parent:
                    self.request_stop("parent changed")
        except BaseException as e:  # noqa: BLE001 - even KeyboardInterrupt or SystemExit
            self._stop_reason = self._stop_reason or f"{type(e).__name__}: {e}"
            self._log.exception("plugin main loop failed")
        reason = self._stop_reason
        if reason != "shutdown":
            self._log.error("host process is gone; cleaning up and exiting (reason: %s)", reason)
        code = 0 if reason == "shutdown" else 3
        try:
            if self._on_stop is not None:
                self._on_stop(reason)
        except Exception:  # noqa: BLE001
            self._log.exception("clean-up on stop failed")
        finally:
            broker.close()
            stdio.close()
            server.stop(grace=None)
            shutil.rmtree(workdir, ignore_errors=True)
            for h in logging.getLogger().handlers:
                try:
                    h.flush()
                except Exception:  # noqa: BLE001
                    pass
            # Worker threads may still be blocked in an author's code; the
            # process ends here regardless.
            os._exit(code)

    def _health(self, request: gp.HealthCheckRequest, context) -> gp.HealthCheckResponse:
        if request.service not in ("", "plugin"):
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return gp.HealthCheckResponse(status=gp.HealthCheckResponse.SERVING)

    def _controller_shutdown(self, _request, _context) -> gp.Empty:
        self.request_stop("shutdown")
        return gp.Empty()
