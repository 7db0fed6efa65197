"""A checked connection's bytes, copied both ways kernel to kernel.

The proxy (:mod:`.proxy`) reads and checks what it must (the request head, a tunnel's TLS
ClientHello) on its event loop, then hands both sockets here for the blind copy.

Choices, and why:

- **``os.splice`` through a pipe, one thread per direction.** The asyncio stream copy
  this replaces moved 0.6 to 1 GB/s against a loopback server serving 4 GB/s: every chunk
  was read into a Python ``bytes``, queued in a transport's buffer and written again, all
  on the one event-loop thread that every call's connections share. Splicing moves pages
  from one socket's receive queue into a pipe and on to the other socket without entering
  Python; a blocking thread per direction waits in the kernel, not in the loop, so a busy
  tunnel neither slows another call's checks nor shares their core. Measured (the proxy
  alone, docs/performance.md): splicing in threads about 3.5 GB/s, ``recv_into`` and
  ``sendall`` with a preallocated buffer in threads 2.6 to 2.9, splicing on the event
  loop (non-blocking, woken by readiness) 1.6.
- **A pipe grows only for a transfer in bulk.** Each direction starts with the kernel's
  default pipe (64 KiB) and grows it to 1 MiB once it has carried :data:`_BULK` bytes: a
  64 KiB pipe costs the copying thread about twice the CPU per byte of a 1 MiB one. (Not
  "once a splice fills it": a pipe is full when its slots are, one per piece of a
  socket buffer, which from a network card often hold far less than a page.) The kernel
  counts a pipe's size against its user's quota (``pipe-user-pages-soft``, 64 MiB by
  default; a root daemon is exempt), and past it every new pipe has two pages and cannot
  grow: a copy then costs twelve times the CPU and moves at a quarter of the speed. With
  1 MiB from the start, 32 tunnels open at once, idle ones included, reached it; now 512
  idle ones do, or 32 moving data in bulk.
- **What the proxy already holds goes first** (``first``: a forwarded request head, a
  ClientHello and whatever the client sent behind it), then the splicing. The event loop
  sends what the server's socket takes at once (all of a ClientHello), before any thread
  is asked to copy: the server starts on its answer while the threads wake, instead of
  after one has (on a busy machine, or a virtual one whose idle CPU must be woken, each
  wake-up on the way is a fraction of a millisecond). The loop never waits for the
  server: what it cannot take at once, the upward thread sends by ``sendall`` before it
  splices, as the downward one copies the server's answer (a server that answers before
  it reads the whole request does not hold up the tunnel).
- **The command's leg uses Reno** (``TCP_CONGESTION``; the server's leg keeps the host's
  choice). That connection is a loopback inside the sandbox's own network namespace (the
  relay's port), where congestion control shares no link, but it inherits the host's
  default: with BBR (the test machine's), which paces, the copying thread spent a quarter
  to a third more CPU per GB than with Reno, which sends as the window allows
  (docs/performance.md). Reno is built into every kernel and allowed to every user. A
  command that connects to the proxy socket itself (a Unix socket) has no such leg.
- **Counts are bytes that reached the other side**, added as each splice out of the pipe
  returns: a transfer cut short records what was sent, not what was read.
- **Ending.** The server's end (end of stream or an error) ends the tunnel: the client
  gets the end of the response and what it still sends has nowhere to go. The client's
  end of stream is passed on as a half-close (``shutdown(SHUT_WR)`` to the server), and the
  response still comes back. An error either way ends both. Ending (also when the call is
  cancelled or times out and its task is cancelled) shuts both sockets down, which wakes
  a thread blocked in ``splice`` at once; the coroutine then waits for both threads, so
  the counts are final before the effect is recorded.
- **A limit for the client's way** (a plain HTTP request's body, from its
  ``Content-Length``): the copy stops there, so bytes behind the checked request (a second,
  pipelined one, naming another host) never reach the server unchecked.
- **Each thread works on duplicates of the two descriptors** and closes them itself as
  it ends: the proxy may close its own sockets at any time without a thread ever
  splicing into a descriptor number that was closed and reused.
- **Threads are kept for the next tunnel** (:mod:`shellwardd.workers`): one that has finished
  its copy waits up to :data:`_IDLE_SECONDS` for another, instead of a thread started and
  ended per direction and connection. Starting one blocks the event loop until it runs
  (about 50 µs each, two per tunnel, more on a busy machine), which every HTTPS
  connection paid before its handshake could pass. Never a bounded pool: a tunnel
  whose second direction waited for a free thread would wait for ever. A waiting thread
  holds no descriptor; it is named ``egress-tunnel (idle)``, a copying one
  ``egress-tunnel``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket

from shellwardd.workers import ReusedThreads

# What a direction's pipe grows to in a transfer in bulk (the default pipe-max-size): one
# splice moves up to this much.
_PIPE_SIZE = 1 << 20
# What a direction has carried when it is a transfer in bulk.
_BULK = 1 << 18
# How long a thread whose tunnel has ended waits for the next one before it ends.
_IDLE_SECONDS = 60.0
# The congestion control of the command's loopback leg.
_CLIENT_CONGESTION = b"reno"


async def copy_both_ways(
    client: socket.socket,
    upstream: socket.socket,
    first: bytes,
    counts: list[int],
    upward_limit: int | None = None,
) -> None:
    """Copy until both ways have ended (each end's half-close passed on to the other), or
    the call ends (cancelled), adding to counts [to upstream, from it]. ``upward_limit``:
    how many of the client's bytes after ``first`` go upstream at most (a forwarded
    request's body); the client's way ends there, without a half-close. The sockets stay
    the caller's (to close); nothing else may read or write them meanwhile."""
    loop = asyncio.get_running_loop()
    sent = 0
    if first:
        with contextlib.suppress(OSError):  # full, or the server is gone: the thread tries
            sent = upstream.send(first)  # non-blocking: what the socket takes now
        counts[0] += sent
    for sock in (client, upstream):
        sock.setblocking(True)  # the threads block in the kernel, not the loop
    if client.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):  # already reset by the command: the copy ends it
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, _CLIENT_CONGESTION)
    upward = _start(loop, client, upstream, first[sent:], counts, 0, upward_limit)
    downward = _start(loop, upstream, client, b"", counts, 1, None)
    try:
        # Not the server's end alone: a server that half-closes first (it has sent all)
        # must still receive all the client sends after that.
        await asyncio.shield(asyncio.gather(upward, downward))
    finally:
        # Both ways are done, or the call ended: stop both now.
        for sock in (client, upstream):
            _shut(sock)
        await asyncio.wait({upward, downward})


def _start(
    loop: asyncio.AbstractEventLoop,
    source: socket.socket,
    sink: socket.socket,
    first: bytes,
    counts: list[int],
    slot: int,
    limit: int | None,
) -> asyncio.Future[None]:
    done: asyncio.Future[None] = loop.create_future()
    ends = (source.dup(), sink.dup())

    def run() -> None:
        try:
            _copy(*ends, first, counts, slot, limit)
        finally:
            for end in ends:
                end.close()
            # A stopped loop (the daemon shutting down) has nobody waiting.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, done)

    _workers.run(run)
    return done


_workers = ReusedThreads("egress-tunnel", _IDLE_SECONDS)


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


def _copy(
    source: socket.socket,
    sink: socket.socket,
    first: bytes,
    counts: list[int],
    slot: int,
    limit: int | None,
) -> None:
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        grow = fcntl.fcntl(write_end, fcntl.F_GETPIPE_SZ) < _PIPE_SIZE
        carried = 0
        if first:
            sink.sendall(first)
            counts[slot] += len(first)
        left = limit
        while left != 0:
            size = os.splice(source.fileno(), write_end, min(_PIPE_SIZE, left or _PIPE_SIZE))
            if not size:
                sink.shutdown(socket.SHUT_WR)  # a half-close is passed on
                return
            left = None if left is None else left - size
            carried += size
            while size:
                moved = os.splice(read_end, sink.fileno(), size)
                counts[slot] += moved
                size -= moved
            if grow and carried >= _BULK:
                grow = False  # asked once; the pipe is empty here, as resizing wants
                with contextlib.suppress(OSError):  # past the user's pipe quota: as it is
                    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    except OSError:
        # A reset or broken pipe either way ends the tunnel both ways.
        _shut(source)
        _shut(sink)
    finally:
        os.close(read_end)
        os.close(write_end)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already shut down, or never connected
        sock.shutdown(socket.SHUT_RDWR)
