"""What the network proxy costs: one HTTPS connection, and a large download, through the
daemon's proxy (the command's socket, handed over by the sandbox relay → proxy → server)
against the same client connecting directly from the host. Then the proxy alone: a raw
download from the host through the call's Unix socket, no sandbox.

The servers run on the host's 127.0.0.1 (the operator allow-list names the address, a pinned
name resolves to it), in a process of their own: in the bench's process they would share
its interpreter lock with the proxy's threads, which the daemon's proxy never does with a
registry. The same client code, run by the same interpreter (the host's python3, the
sandbox's), runs inside a sandbox with network (through the proxy, by CONNECT) and on the
host (directly); nothing touches the internet.

    python bench/network.py [--runs 200] [--megabytes 200] [--repeat 1]

With ``--repeat N`` the whole comparison runs N times in turns and each figure is printed
as the median of the N, with their range in brackets, and the load average.

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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shellwardd.config import Limits  # noqa: E402
from shellwardd.egress import relay  # noqa: E402
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


def serve_here(cert: str, key: str) -> int:
    """The servers' process (``--serve``): print both ports, serve until stdin closes."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    print(serve(context), serve(None), flush=True)
    sys.stdin.read()
    return 0


def servers(cert: Path, key: Path) -> tuple[subprocess.Popen[str], int, int]:
    """The HTTPS and HTTP servers in a process of their own, and their ports."""
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(cert), str(key)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    tls_port, plain_port = map(int, process.stdout.readline().split())
    return process, tls_port, plain_port


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


def compare(
    sandbox: Sandbox, workspace: Path, script: Path, argv: list[str], megabytes: int
) -> dict[str, float]:
    """One round: the client through the proxy, then directly, then the proxy alone."""
    policy = EgressPolicy(operator=frozenset({NAME, "127.0.0.1"}))
    command = " ".join(["python3", str(script), *argv])
    spec = SandboxSpec(command, workspace, workspace, {}, policy, 3600.0, Limits(), 1 << 20)
    outcome = sandbox.run(spec, lambda chunk: None, threading.Event())
    if outcome.exit_code != 0:
        raise RuntimeError(outcome.stderr.text)
    proxied = json.loads(outcome.stdout.text)
    # Direct: the same client and interpreter on the host, to the address (the
    # certificate names it too).
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    direct_run = subprocess.run(
        [relay.python(), str(script), "127.0.0.1", *argv[1:]],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    direct = json.loads(direct_run.stdout)
    alone_direct, alone = proxy_alone(int(argv[2]), megabytes)
    return {
        "direct_ms": direct["median_ms"], "direct_p95": direct["p95_ms"],
        "proxy_ms": proxied["median_ms"], "proxy_p95": proxied["p95_ms"],
        "extra_ms": proxied["median_ms"] - direct["median_ms"],
        "direct_mbs": direct["mb_per_s"], "proxy_mbs": proxied["mb_per_s"],
        "ratio": proxied["mb_per_s"] / direct["mb_per_s"],
        "alone_direct_mbs": alone_direct, "alone_mbs": alone, "alone_ratio": alone / alone_direct,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--serve", nargs=2, metavar=("CERT", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve_here(*args.serve)

    workspace = Path(tempfile.mkdtemp(prefix="shellward-bench-net-"))
    workspace.chmod(0o777)
    cert, key = self_signed_certificate(workspace, NAME)
    cert.chmod(0o644)
    process, tls_port, plain_port = servers(cert, key)
    script = workspace / "client.py"
    script.write_text(CLIENT)
    argv = [NAME, str(tls_port), str(plain_port), str(args.runs), str(args.megabytes), str(cert)]

    sandbox = Sandbox(
        state_dir=Path(tempfile.mkdtemp()), resolver=system_resolver({NAME: "127.0.0.1"})
    )
    sandbox.check()
    try:
        rounds = [
            compare(sandbox, workspace, script, argv, args.megabytes) for _ in range(args.repeat)
        ]
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        sandbox.close()
        process.kill()

    def figure(name: str, form: str = "7.2f") -> str:
        values = [r[name] for r in rounds]
        middle = format(statistics.median(values), form)
        if len(values) == 1:
            return middle
        return f"{middle} [{format(min(values), form).strip()}–{format(max(values), form).strip()}]"

    extra = statistics.median(r["extra_ms"] for r in rounds)
    ratio = statistics.median(r["ratio"] for r in rounds)
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"{args.repeat} round(s); load average at the end {load}")
    print(f"one HTTPS connection + GET, median of {args.runs} (p95):")
    print(f"  direct         {figure('direct_ms')} ms ({figure('direct_p95', '.2f')})")
    print(f"  through proxy  {figure('proxy_ms')} ms ({figure('proxy_p95', '.2f')})")
    print(f"  extra          {figure('extra_ms')} ms   target ≤ 2 ms: "
          f"{'met' if extra <= 2 else 'NOT met'}")  # fmt: skip
    print(f"download of {args.megabytes} MB (plain HTTP in a CONNECT tunnel):")
    print(f"  direct         {figure('direct_mbs', '7.0f')} MB/s")
    print(f"  through proxy  {figure('proxy_mbs', '7.0f')} MB/s")
    print(f"  ratio          {figure('ratio', '7.0%')}   target ≥ 80%: "
          f"{'met' if ratio >= 0.8 else 'NOT met'}")  # fmt: skip
    print("the same download, raw, from the host through the call's socket (no sandbox):")
    print(f"  direct         {figure('alone_direct_mbs', '7.0f')} MB/s")
    print(f"  proxy alone    {figure('alone_mbs', '7.0f')} MB/s ({figure('alone_ratio', '.0%')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
