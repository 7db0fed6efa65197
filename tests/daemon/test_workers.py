"""The threads kept for the next job (streamed calls, the proxy's tunnels)."""

from __future__ import annotations

import threading

from shellwardd.workers import ReusedThreads
from tests.helpers import wait_for


def test_a_job_never_waits_for_a_thread_and_ended_ones_are_reused() -> None:
    threads = ReusedThreads("test-call", 60.0)
    release = threading.Event()
    ran: list[threading.Thread] = []
    both = threading.Barrier(3, timeout=10)

    def blocking() -> None:
        ran.append(threading.current_thread())
        both.wait()  # two jobs run at once: the second did not wait for the first
        release.wait(10)

    threads.run(blocking)
    threads.run(blocking)
    both.wait()
    release.set()
    wait_for(lambda: threads._idle == 2)
    before = threading.active_count()
    done = threading.Event()
    again: list[threading.Thread] = []
    threads.run(lambda: (again.append(threading.current_thread()), done.set()))
    assert done.wait(10)
    assert len(set(ran)) == 2 and again[0] in ran  # an ended call's thread took it
    assert threading.active_count() == before
    assert all(t.daemon for t in ran)  # a call still running never holds up the exit


def test_a_thread_waiting_in_vain_ends_and_the_next_job_gets_a_new_one() -> None:
    threads = ReusedThreads("test-idle", 0.2)
    first: list[threading.Thread] = []
    threads.run(lambda: first.append(threading.current_thread()))
    wait_for(lambda: first and not first[0].is_alive())
    assert threads._idle == 0
    done = threading.Event()
    threads.run(done.set)
    assert done.wait(10)
