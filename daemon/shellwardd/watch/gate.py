"""The per-workspace gate: exclusive calls run alone, shared calls run together.

inotify cannot tell which process wrote a file, so two calls that write in one workspace
at the same time cannot be told apart. Calls that may write take the gate exclusively;
calls classified read-only share it (and any write they do make anyway is reported on
every call that overlapped it). A waiting exclusive call blocks new shared ones, so a
stream of reads cannot starve a write.
"""

from __future__ import annotations

import threading
import time


class CallGate:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._exclusive_waiting = 0

    def acquire(self, *, exclusive: bool, timeout: float | None = None) -> bool:
        """Enter the gate; False if ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if exclusive:
                self._exclusive_waiting += 1
            try:
                while self._exclusive or (self._shared if exclusive else self._exclusive_waiting):
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._cond.wait(remaining)
                if exclusive:
                    self._exclusive = True
                else:
                    self._shared += 1
                return True
            finally:
                if exclusive:
                    self._exclusive_waiting -= 1
                    # A timed-out writer may have been holding shared callers back.
                    self._cond.notify_all()

    def release(self, *, exclusive: bool) -> None:
        with self._cond:
            if exclusive:
                self._exclusive = False
            else:
                self._shared -= 1
            self._cond.notify_all()
