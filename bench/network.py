"""What the network proxy costs: one HTTPS connection, and a large download, through the
daemon's proxy (the command's socket, handed over by the sandbox relay → proxy → server)
against the same client connecting directly from the host. Then the proxy alone: a raw
download from the host through the call's Unix socket, no sandbox.

The servers run on the host's 127.0.0.1 (the operator allow-list names the address, a pinned
name resolves to it). The same client code runs inside a sandbox with network (through the
proxy, by CONNECT) and on the host (directly); nothing touches the internet.

    python bench/network.py [--runs 200] [--megabytes 200]

Targets: median extra latency of one HTTPS connection ≤ 2 ms; download throughput through
the proxy ≥ 80% of direct.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shellwardd.config import Limits  # noqa: E402
from shellwardd.egress.policy import EgressPolicy  # noqa: E402
from shellwardd.egress.proxy import EgressProxy, system_resolver  # noqa: E402
from shellwardd.sandbox import Sandbox, SandboxSpec  # noqa: E402
from tests.helpers import self_signed_certificate  # noqa: E402

NAME = "bench.test"
CHUNK = b"x" * (1 << 20)

# Runs inside the sandbox (through the proxy) and on the host (direct): prints JSON.
CLIENT = r"""
import http.client, json, os, ssl, statistics, sys, time
host, tls_port, plain_port, runs, megabytes, cafile = sys.argv[1:7]
proxy = os.environ.get("HTTPS_PROXY", "")
context = ssl.create_default_context(cafile=cafile)

def connection(cls, port, **kw):
    if proxy:
        c = cls("127.0.0.1", 3128, **kw)
        c.set_tunnel(host, int(port))
        return c
    return cls(host, int(port), **kw)

def one_https():
    start = time.perf_counter()
    c = connection(http.client.HTTPSConnection, tls_port, context=context)
    c.request("GET", "/small")
    c.getresponse().read()
    c.close()
    return time.perf_counter() - start

samples = [one_https() for _ in range(int(runs))]
c = connection(http.client.HTTPConnection, plain_port)
start = time.perf_counter()
c.request("GET", f"/big?{megabytes}")
response, total = c.getresponse(), 0
while data := response.read(1 << 20):
    total += len(data)
seconds = time.perf_counter() - start
print(json.dumps({"median_ms": statistics.median(samples) * 1000,
                  "p95_ms": sorted(samples)[int(len(samples) * 0.95)] * 1000,
                  "mb_per_s": total / seconds / 1e6, "bytes": total}))
"""


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body are two writes: with Nagle the second waits for the client's
    # delayed ACK (40 ms), which would swamp the proxy's cost in every sample.
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        if self.path.startswith("/big?"):
            megabytes = int(self.path.split("?")[1])
            self.send_response(200)
            self.send_header("Content-Length", str(megabytes * len(CHUNK)))
            self.end_headers()
            for _ in range(megabytes):
                self.wfile.write(CHUNK)
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


def serve(context: ssl.SSLContext | None) -> int:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return int(server.server_address[1])


def proxy_alone(port: int, megabytes: int) -> tuple[float, float]:
    """MB/s of one raw download directly and through a call's proxy socket alone (a client
    on the host, no sandbox, no relay): what the daemon's copy costs by itself."""
    proxy = EgressProxy(system_resolver({NAME: "127.0.0.1"}))
    call = proxy.open(EgressPolicy(operator=frozenset({NAME, "127.0.0.1"})))
    buffer = bytearray(len(CHUNK))

    def download(sock: socket.socket) -> float:
        with sock:
            sock.sendall(f"GET /big?{megabytes} HTTP/1.1\r\nHost: {NAME}\r\n\r\n".encode())
            start, total, want = time.perf_counter(), 0, megabytes * len(CHUNK)
            while total < want and (size := sock.recv_into(buffer)):
                total += size
            return total / (time.perf_counter() - start) / 1e6

    try:
        direct = download(socket.create_connection(("127.0.0.1", port)))
        tunnel = socket.socket(socket.AF_UNIX)
        tunnel.connect(str(call.socket_path))
        tunnel.sendall(f"CONNECT {NAME}:{port} HTTP/1.1\r\n\r\n".encode())
        tunnel.recv(100)  # 200 Connection established
        return direct, download(tunnel)
    finally:
        proxy.close_call(call)
        proxy.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--megabytes", type=int, default=200)
    args = parser.parse_args()

    workspace = Path(tempfile.mkdtemp(prefix="shellward-bench-net-"))
    workspace.chmod(0o777)
    cert, key = self_signed_certificate(workspace, NAME)
    cert.chmod(0o644)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    tls_port, plain_port = serve(context), serve(None)
    script = workspace / "client.py"
    script.write_text(CLIENT)
    argv = [NAME, str(tls_port), str(plain_port), str(args.runs), str(args.megabytes), str(cert)]

    sandbox = Sandbox(
        state_dir=Path(tempfile.mkdtemp()), resolver=system_resolver({NAME: "127.0.0.1"})
    )
    sandbox.check()
    try:
        policy = EgressPolicy(operator=frozenset({NAME, "127.0.0.1"}))
        command = " ".join(["python3", str(script), *argv])
        spec = SandboxSpec(command, workspace, workspace, {}, policy, 3600.0, Limits(), 1 << 20)
        outcome = sandbox.run(spec, lambda chunk: None, threading.Event())
        if outcome.exit_code != 0:
            print(outcome.stderr.text, file=sys.stderr)
            return 1
        proxied = json.loads(outcome.stdout.text)
        # Direct: the same client on the host, to the address (the certificate names it too).
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        direct_run = subprocess.run(
            [sys.executable, str(script), "127.0.0.1", *argv[1:]],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        direct = json.loads(direct_run.stdout)
    finally:
        sandbox.close()

    alone_direct, alone = proxy_alone(plain_port, args.megabytes)
    extra = proxied["median_ms"] - direct["median_ms"]
    ratio = proxied["mb_per_s"] / direct["mb_per_s"]
    print(f"one HTTPS connection + GET, median of {args.runs} (p95):")
    print(f"  direct         {direct['median_ms']:7.2f} ms ({direct['p95_ms']:.2f})")
    print(f"  through proxy  {proxied['median_ms']:7.2f} ms ({proxied['p95_ms']:.2f})")
    print(f"  extra          {extra:7.2f} ms   target ≤ 2 ms: {'met' if extra <= 2 else 'NOT met'}")
    print(f"download of {args.megabytes} MB (plain HTTP in a CONNECT tunnel):")
    print(f"  direct         {direct['mb_per_s']:7.0f} MB/s")
    print(f"  through proxy  {proxied['mb_per_s']:7.0f} MB/s")
    print(f"  ratio          {ratio:7.0%}   target ≥ 80%: {'met' if ratio >= 0.8 else 'NOT met'}")
    print("the same download, raw, from the host through the call's socket (no sandbox):")
    print(f"  direct         {alone_direct:7.0f} MB/s")
    print(f"  proxy alone    {alone:7.0f} MB/s ({alone / alone_direct:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
