"""Threads kept for the next job: each runs one job at a time and, once it ends, waits a
while for another instead of ending.

Starting a thread costs its start and a handshake with the starting thread
(``Thread.start`` waits until the new thread runs): 0.05 ms on a quiet machine, up to
0.45 ms of CPU on a busy one, paid before the job can begin (an HTTPS connection's
handshake through the proxy, a streamed call's classification). The proxy's tunnels and
the streamed calls take their threads from here (docs/performance.md).

Never a bounded pool: a job never waits for a thread (one with none waiting starts a new
one), since a tunnel whose second direction, or a call whose cancellation, waited for a
free thread could wait for ever. A waiting thread holds nothing of its last job and is
named ``<name> (idle)``; a running one ``<name>``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class ReusedThreads:
    """Runs each job at once on a thread of its own, reusing the threads of ended jobs;
    one that waits ``idle_seconds`` for a job in vain ends."""

    def __init__(self, name: str, idle_seconds: float) -> None:
        self._busy_name, self._idle_name = name, f"{name} (idle)"
        self._idle_seconds = idle_seconds
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        # Waiting threads that no job has been promised to.
        self._idle = 0

    def run(self, job: Callable[[], None]) -> None:
        """Run ``job`` at once: in a waiting thread, or in a new one if none waits. The
        job handles its own exceptions: one that escapes ends its thread."""
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._jobs.put(job)
                return
        thread = threading.Thread(target=self._work, args=(job,), name=self._busy_name)
        thread.daemon = True  # a job still running never holds up the daemon's exit
        thread.start()

    def _work(self, job: Callable[[], None]) -> None:
        thread = threading.current_thread()
        while True:
            job()
            thread.name = self._idle_name
            with self._lock:
                self._idle += 1
            next_job = self._next()
            if next_job is None:
                return
            thread.name = self._busy_name
            job = next_job

    def _next(self) -> Callable[[], None] | None:
        """The next job, or None once this thread may end."""
        while True:
            try:
                return self._jobs.get(timeout=self._idle_seconds)
            except queue.Empty:
                with self._lock:
                    if self._idle:  # no job is promised to the waiting threads: go
                        self._idle -= 1
                        return None
                # One was promised as this thread gave up waiting: it is in the queue.
