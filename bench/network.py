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

    python bench/network.py [--runs 200] [--downloads 9] [--megabytes 200] [--realtime]

**In turns.** One download takes 50 to 150 ms here, and the direct figure alone moves 2 to
4× from one download to the next on a shared machine, so both clients run for the whole
bench and take turns, one at a time: the server hands out the turns (HTTPS connections in
blocks of :data:`BLOCK`, then one download each) in the order A B B A A B … , so a drift in
the machine's load falls on both sides alike. Figures are medians with their range.

**CPU per byte.** Each download also reports the CPU seconds per GB of each actor: the
server's sending thread and the client's process (each measures its own), and through the
proxy the daemon's copying thread (``egress/tunnel.py``, run in this process: the bench
wraps its copy function with ``time.thread_time``; the daemon carries no timing code).
The kernel's loopback TCP work is charged to whichever thread runs it: mostly the sender,
but an ACK sends the data its peer has queued, and a timer runs in the thread it
interrupts, so part of one actor's work can show as another's. From those figures the
bench prints the rate each side's CPU allows: a core per actor (the busiest one bounds the
rate) and two cores (this machine: also the sum over two).

**A quiet machine on a busy one** (``--realtime``). On a busy machine the proxy's thread
competes with other work for the cores, as do the server and the client, and the ratio
moved between 58 and 115 % in runs minutes apart (63 to 80 % with this option). With
``--realtime`` every actor (the servers, both clients, the proxy's threads: all inherit
it) runs under ``SCHED_RR`` priority 1, so the machine's other work waits while a download
runs (the kernel's real-time throttling, 95 % of each second by default, keeps the rest
alive). On the shared 2-core machine the direct download moves by 3× from one turn to the
next without it, by about 10 % with it. It needs ``CAP_SYS_NICE`` (root).

Targets: median extra latency of one HTTPS connection ≤ 2 ms; download throughput through
the proxy ≥ 80% of direct.
"""

from __future__ import annotations

import argparse
import http.client
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shellwardd.config import Limits  # noqa: E402
from shellwardd.egress import relay, tunnel  # noqa: E402
from shellwardd.egress.policy import EgressPolicy  # noqa: E402
from shellwardd.egress.proxy import EgressProxy, system_resolver  # noqa: E402
from shellwardd.sandbox import Sandbox, SandboxSpec  # noqa: E402
from tests.helpers import self_signed_certificate  # noqa: E402

NAME = "bench.test"
CHUNK = b"x" * (1 << 20)
GB = 1e9
# HTTPS connections per turn.
BLOCK = 25
# A side that waits longer than this for its turn gives up (the other side has failed).
TURN_TIMEOUT = 300.0
PROXIED, DIRECT = "proxied", "direct"

# Runs inside the sandbox (through the proxy) and on the host (direct): asks the server for
# its turns and does what each says, until the server says it is over.
CLIENT = r"""
import http.client, json, os, ssl, sys, time
host, tls_port, plain_port, side, cafile = sys.argv[1:6]
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

def download(megabytes, tag):
    c = connection(http.client.HTTPConnection, plain_port)
    cpu, start = time.process_time(), time.perf_counter()
    c.request("GET", f"/big?megabytes={megabytes}&tag={tag}")
    response, total = c.getresponse(), 0
    while data := response.read(1 << 20):
        total += len(data)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    c.close()
    return {"seconds": seconds, "client_cpu": cpu, "bytes": total}

result = None
while True:
    c = connection(http.client.HTTPConnection, plain_port)
    c.request("POST", f"/next?side={side}", body=json.dumps(result))
    job = json.loads(c.getresponse().read())
    c.close()
    if job["kind"] == "end":
        break
    if job["kind"] == "https":
        result = {"samples": [one_https() for _ in range(job["count"])]}
    else:
        result = download(job["megabytes"], job["tag"])
"""


class Turns:
    """The server's side of the turns: who goes next, what each did, what the server spent."""

    def __init__(self, schedule: list[tuple[str, dict[str, object]]]) -> None:
        self._schedule = schedule
        self._index = 0
        self._changed = threading.Condition()
        self.results: list[dict[str, object]] = []
        # tag → the server's sending thread's CPU seconds for that download.
        self.server_cpu: dict[str, float] = {}

    def next(self, side: str, result: dict[str, object] | None) -> dict[str, object]:
        """Record ``side``'s last job's result; its next job once it is its turn."""
        with self._changed:
            if result is not None:
                self.results.append({"side": side, **self._schedule[self._index][1], **result})
                self._index += 1
                self._changed.notify_all()
            waiting = self._changed.wait_for(
                lambda: (
                    self._index >= len(self._schedule) or self._schedule[self._index][0] == side
                ),
                timeout=TURN_TIMEOUT,
            )
            if not waiting or self._index >= len(self._schedule):
                return {"kind": "end"}
            return self._schedule[self._index][1]

    def spent(self, tag: str, cpu: float) -> None:
        """The server's sending thread spent ``cpu`` seconds on the download ``tag``."""
        with self._changed:
            self.server_cpu[tag] = cpu

    def stats(self) -> dict[str, object]:
        with self._changed:
            return {"results": self.results, "server_cpu": self.server_cpu}


def schedule(runs: int, downloads: int, megabytes: int) -> list[tuple[str, dict[str, object]]]:
    """Each side's HTTPS connections in blocks, then its downloads, in turns A B B A …"""
    steps: list[tuple[str, dict[str, object]]] = []
    blocks = [min(BLOCK, runs - start) for start in range(0, runs, BLOCK)]
    jobs = [{"kind": "https", "count": count} for count in blocks]
    jobs += [{"kind": "download", "megabytes": megabytes} for _ in range(downloads)]
    for number, job in enumerate(jobs):
        order = (PROXIED, DIRECT) if number % 2 == 0 else (DIRECT, PROXIED)
        for side in order:
            steps.append((side, {**job, "tag": f"{side}-{number}"}))
    return steps


def handler(turns: Turns) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body are two writes: with Nagle the second waits for the client's
        # delayed ACK (40 ms), which would swamp the proxy's cost in every sample.
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {key: values[0] for key, values in parse_qs(url.query).items()}
            if url.path == "/big":
                megabytes = int(query["megabytes"])
                self.send_response(200)
                self.send_header("Content-Length", str(megabytes * len(CHUNK)))
                self.end_headers()
                cpu = time.thread_time()
                for _ in range(megabytes):
                    self.wfile.write(CHUNK)
                turns.spent(query["tag"], time.thread_time() - cpu)
                return
            body = json.dumps(turns.stats()).encode() if url.path == "/stats" else b"ok"
            self.answer(body)

        def do_POST(self) -> None:
            url = urlsplit(self.path)
            side = parse_qs(url.query)["side"][0]
            result = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.answer(json.dumps(turns.next(side, result)).encode())

        def answer(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def serve(turns: Turns, context: ssl.SSLContext | None) -> int:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler(turns))
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return int(server.server_address[1])


def serve_here(cert: str, key: str, plan: str) -> int:
    """The servers' process (``--serve``): print both ports, serve until stdin closes."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    turns = Turns([(side, job) for side, job in json.loads(plan)])
    print(serve(turns, context), serve(turns, None), flush=True)
    sys.stdin.read()
    return 0


def servers(
    cert: Path, key: Path, plan: list[tuple[str, dict[str, object]]]
) -> tuple[subprocess.Popen[str], int, int]:
    """The HTTPS and HTTP servers in a process of their own, and their ports."""
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(cert), str(key), json.dumps(plan)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    tls_port, plain_port = map(int, process.stdout.readline().split())
    return process, tls_port, plain_port


def server_stats(port: int) -> dict[str, Any]:
    """What the clients reported, and the server's CPU per download."""
    connection = http.client.HTTPConnection("127.0.0.1", port)
    connection.request("GET", "/stats")
    stats: dict[str, Any] = json.loads(connection.getresponse().read())
    connection.close()
    return stats


@dataclass
class Copy:
    """One direction of one tunnel: its thread's CPU seconds and the bytes it moved."""

    slot: int
    cpu: float
    moved: int


@contextmanager
def copies_timed() -> Iterator[list[Copy]]:
    """Every tunnel direction copied meanwhile, in the order they end."""
    done: list[Copy] = []
    original = tunnel._copy

    def timed(
        source: socket.socket,
        sink: socket.socket,
        first: bytes,
        counts: list[int],
        slot: int,
        limit: int | None,
    ) -> None:
        cpu, before = time.thread_time(), counts[slot]
        try:
            original(source, sink, first, counts, slot, limit)
        finally:
            done.append(Copy(slot, time.thread_time() - cpu, counts[slot] - before))

    tunnel._copy = timed
    try:
        yield done
    finally:
        tunnel._copy = original


def downloads_copied(copies: list[Copy], size: int) -> list[Copy]:
    """The downloads' downward copies (a download's tunnel carries its whole size)."""
    return [copy for copy in copies if copy.slot == 1 and copy.moved >= size]


@dataclass
class Download:
    """One download's figures: its wall time and each actor's CPU seconds."""

    side: str
    tag: str
    seconds: float
    size: int
    client_cpu: float
    server_cpu: float = 0.0
    proxy_cpu: float | None = None  # the copying thread's, through the proxy

    @property
    def mb_per_s(self) -> float:
        return self.size / self.seconds / 1e6

    def per_gb(self, cpu: float) -> float:
        return cpu / (self.size / GB)


def with_cpu(
    downloads: list[Download], server_cpu: dict[str, float], copies: list[Copy]
) -> list[Download]:
    """The downloads with the server's CPU and, through the proxy, the copying thread's."""
    size = min(download.size for download in downloads)
    copied = iter(downloads_copied(copies, size))
    for download in downloads:
        download.server_cpu = server_cpu[download.tag]
        if download.side == PROXIED:
            download.proxy_cpu = next(copied).cpu
    return downloads


def proxy_alone(port: int, megabytes: int, downloads: int) -> tuple[list[Download], list[Copy]]:
    """Raw downloads from the host, directly and through a call's proxy socket alone (no
    sandbox, no relay) in turns: what the daemon's copy costs by itself."""
    proxy = EgressProxy(system_resolver({NAME: "127.0.0.1"}))
    call = proxy.open(EgressPolicy(operator=frozenset({NAME, "127.0.0.1"})))
    buffer = bytearray(len(CHUNK))
    want = megabytes * len(CHUNK)

    def download(sock: socket.socket, side: str, tag: str) -> Download:
        with sock:
            request = f"GET /big?megabytes={megabytes}&tag={tag} HTTP/1.1\r\nHost: {NAME}\r\n\r\n"
            cpu, start, total = time.thread_time(), time.perf_counter(), 0
            sock.sendall(request.encode())
            while total < want and (size := sock.recv_into(buffer)):
                total += size
            seconds = time.perf_counter() - start
            return Download(side, tag, seconds, total, time.thread_time() - cpu)

    def through_proxy(tag: str) -> Download:
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(str(call.socket_path))
        sock.sendall(f"CONNECT {NAME}:{port} HTTP/1.1\r\n\r\n".encode())
        sock.recv(100)  # 200 Connection established
        return download(sock, PROXIED, tag)

    results: list[Download] = []
    try:
        with copies_timed() as copies:
            for number in range(downloads):
                for side in (DIRECT, PROXIED) if number % 2 == 0 else (PROXIED, DIRECT):
                    tag = f"alone-{side}-{number}"
                    if side == DIRECT:
                        sock = socket.create_connection(("127.0.0.1", port))
                        results.append(download(sock, DIRECT, tag))
                    else:
                        results.append(through_proxy(tag))
    finally:
        proxy.close_call(call)
        proxy.close()
    return results, copies


def through_sandbox(
    sandbox: Sandbox, workspace: Path, command: str, failures: list[str]
) -> threading.Thread:
    """Start the client in a sandbox with network, in a thread of its own."""
    policy = EgressPolicy(operator=frozenset({NAME, "127.0.0.1"}))
    spec = SandboxSpec(command, workspace, workspace, {}, policy, 3600.0, Limits(), 1 << 20)

    def run() -> None:
        outcome = sandbox.run(spec, lambda chunk: None, threading.Event())
        if outcome.exit_code != 0:
            failures.append(outcome.stderr.text)

    thread = threading.Thread(target=run, name="sandboxed-client")
    thread.start()
    return thread


def median_range(values: list[float], form: str) -> str:
    middle = format(statistics.median(values), form)
    if len(values) == 1:
        return middle
    return f"{middle} [{format(min(values), form).strip()}–{format(max(values), form).strip()}]"


def download_report(downloads: list[Download]) -> list[str]:
    """Throughput each side, in turns; each actor's CPU per GB and the rates it allows."""

    def side(name: str) -> list[Download]:
        return [download for download in downloads if download.side == name]

    def rates(found: list[Download]) -> list[float]:
        return [download.mb_per_s for download in found]

    direct, proxied = side(DIRECT), side(PROXIED)
    ratio = statistics.median(rates(proxied)) / statistics.median(rates(direct))
    # Each proxied download against the direct one of its turn (they ran back to back).
    twins = {download.tag.replace(DIRECT, PROXIED): download for download in direct}
    turns = [download.mb_per_s / twins[download.tag].mb_per_s for download in proxied]
    lines = [
        f"  direct         {median_range(rates(direct), '7.0f')} MB/s",
        f"  through proxy  {median_range(rates(proxied), '7.0f')} MB/s",
        f"  ratio          {ratio:7.0%} of the medians; each turn's {median_range(turns, '.0%')}",
        "  CPU seconds per GB (median), wall seconds per GB beside:",
        f"  {'':15}{'server':>8}{'client':>8}{'proxy':>8}{'wall':>8}",
    ]
    allowed: dict[str, tuple[float, float]] = {}
    for name, found in ((DIRECT, direct), (PROXIED, proxied)):
        actors = [
            statistics.median(d.per_gb(d.server_cpu) for d in found),
            statistics.median(d.per_gb(d.client_cpu) for d in found),
        ]
        copies = [d.per_gb(d.proxy_cpu) for d in found if d.proxy_cpu is not None]
        if copies:
            actors.append(statistics.median(copies))
        wall = statistics.median(d.per_gb(d.seconds) for d in found)
        cells = "".join(f"{figure:8.3f}" for figure in actors)
        cells += f"{'–':>8}" if not copies else ""
        lines.append(f"  {name:15}{cells}{wall:8.3f}")
        busiest, total = max(actors), sum(actors)
        # A core per actor: the busiest bounds the rate; two cores: also their sum over two.
        allowed[name] = (1 / busiest, min(1 / busiest, 2 / total))
    for number, cores in enumerate(("a core per actor", "two cores")):
        plain, through = allowed[DIRECT][number], allowed[PROXIED][number]
        lines.append(
            f"  the rate that CPU allows, {cores + ':':17} direct {plain:5.2f} GB/s, "
            f"through proxy {through:5.2f} ({through / plain:.0%})"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200, help="HTTPS connections per side")
    parser.add_argument("--downloads", type=int, default=9, help="downloads per side")
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument(
        "--realtime", action="store_true", help="run every actor under SCHED_RR (needs root)"
    )
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve_here(*args.serve)
    if args.realtime:
        # Before any thread or process starts: they inherit it.
        try:
            os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
        except PermissionError:
            print("--realtime needs CAP_SYS_NICE (run it as root)", file=sys.stderr)
            return 2

    workspace = Path(tempfile.mkdtemp(prefix="shellward-bench-net-"))
    workspace.chmod(0o777)
    cert, key = self_signed_certificate(workspace, NAME)
    cert.chmod(0o644)
    plan = schedule(args.runs, args.downloads, args.megabytes)
    process, tls_port, plain_port = servers(cert, key, plan)
    script = workspace / "client.py"
    script.write_text(CLIENT)
    argv = [str(tls_port), str(plain_port)]

    sandbox = Sandbox(
        state_dir=Path(tempfile.mkdtemp()), resolver=system_resolver({NAME: "127.0.0.1"})
    )
    sandbox.check()
    load_before = os.getloadavg()
    failures: list[str] = []
    try:
        with copies_timed() as copies:
            command = " ".join(["python3", str(script), NAME, *argv, PROXIED, str(cert)])
            sandboxed = through_sandbox(sandbox, workspace, command, failures)
            # Direct: the same client and interpreter on the host, to the address (the
            # certificate names it too).
            env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
            direct = subprocess.run(
                [relay.python(), str(script), "127.0.0.1", *argv, DIRECT, str(cert)],
                env=env, capture_output=True, text=True,
            )  # fmt: skip
            if direct.returncode != 0:
                failures.append(direct.stderr)
            sandboxed.join()
        alone, alone_copies = proxy_alone(plain_port, args.megabytes, args.downloads)
        stats = server_stats(plain_port)
    finally:
        sandbox.close()
        process.kill()
    results: list[dict[str, Any]] = stats["results"]
    if failures or len(results) != len(plan):
        print("\n".join(failures) or "a client stopped before its turns ended", file=sys.stderr)
        return 1
    server_cpu: dict[str, float] = stats["server_cpu"]
    whole = [
        Download(r["side"], r["tag"], r["seconds"], r["bytes"], r["client_cpu"])
        for r in results
        if r["kind"] == "download"
    ]
    with_cpu(whole, server_cpu, copies)
    with_cpu(alone, server_cpu, alone_copies)

    def samples(side: str) -> list[float]:
        found = [r["samples"] for r in results if r["side"] == side and r["kind"] == "https"]
        return [sample * 1000 for block in found for sample in block]

    def p95(values: list[float]) -> float:
        return sorted(values)[int(len(values) * 0.95)]

    direct_ms, proxy_ms = samples(DIRECT), samples(PROXIED)
    extra = statistics.median(proxy_ms) - statistics.median(direct_ms)
    ratio = statistics.median(d.mb_per_s for d in whole if d.side == PROXIED) / statistics.median(
        d.mb_per_s for d in whole if d.side == DIRECT
    )
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"load average at the start {' '.join(f'{v:.1f}' for v in load_before)}, "
          f"at the end {load}{'; actors under SCHED_RR' if args.realtime else ''}")  # fmt: skip
    print(f"one HTTPS connection + GET, median of {args.runs} per side in turns (p95):")
    print(f"  direct         {statistics.median(direct_ms):7.2f} ms ({p95(direct_ms):.2f})")
    print(f"  through proxy  {statistics.median(proxy_ms):7.2f} ms ({p95(proxy_ms):.2f})")
    print(f"  extra          {extra:7.2f} ms   target ≤ 2 ms: "
          f"{'met' if extra <= 2 else 'NOT met'}")  # fmt: skip
    print(f"download of {args.megabytes} MB (plain HTTP in a CONNECT tunnel), "
          f"{args.downloads} per side in turns, median [range]:")  # fmt: skip
    print("\n".join(download_report(whole)))
    print(f"  target ≥ 80%: {'met' if ratio >= 0.8 else 'NOT met'}")
    if not args.realtime:
        print("  (other work on the machine moves this ratio by tens of points either way;")
        print("  --realtime measures the quiet case)")
    print("the same download, raw, from the host through the call's socket (no sandbox):")
    print("\n".join(download_report(alone)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
