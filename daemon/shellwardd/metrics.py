"""Prometheus metrics, served over HTTP when the daemon is started with ``--metrics``.

Choices, and why
- **Off costs nothing.** Every recording function returns at once until :func:`serve` has
  run: no registry, no locks, no label look-ups on the call path of a daemon without
  ``--metrics``. Other modules (the network proxy, the sandbox) call the functions here
  without knowing whether metrics are on.
- **Labels are closed sets.** Kind, status, code, verdict (the idempotency class) and a
  proxy error's reason are enums or a few fixed words. Never a command's text, a path, a
  tool or host name, or an id: they would leak what agents do to whoever scrapes, and each
  new value is a new time series forever.
- **Gauges are read when scraped** (approvals pending, the workspaces' index), from the
  runtime, so they cannot drift from what GetStatus says; a ledger that does not answer
  leaves the approvals gauge out of that scrape rather than failing it.
- **Its own registry**, with the process collector (memory, threads' CPU, open files): the
  daemon's numbers only, whatever else a library registers globally.
- **Loopback by default** (checked in config): the endpoint has no authentication.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client import start_http_server as _start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from shellward.types import Code, CommandResult, WorkspaceStatus
from shellwardd.errors import ConfigError, LedgerError

log = logging.getLogger("shellwardd.metrics")

# Seconds: from a `true` (a few ms in the sandbox) to the default 600 s timeout and past it.
_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600, 3600)
_EFFECT_BUCKETS = (0, 1, 2, 5, 10, 50, 100, 1000, 10000)


@dataclass(frozen=True)
class _Metrics:
    registry: CollectorRegistry
    calls: Counter
    durations: Histogram
    effects: Histogram
    sandbox_errors: Counter
    proxy_errors: Counter


_metrics: _Metrics | None = None


def observe_call(kind: str, result: CommandResult) -> None:
    """Count one call's answer (``kind``: command, tool or replay)."""
    metrics = _metrics
    if metrics is None:
        return
    verdict = result.verdict.idempotency.value if result.verdict is not None else "none"
    metrics.calls.labels(kind, result.status.value, result.code.value, verdict).inc()
    if result.code is Code.SANDBOX_ERROR:
        metrics.sandbox_errors.inc()
    if result.started_at is not None and result.finished_at is not None and not result.replayed:
        metrics.durations.labels(kind).observe(max(0.0, result.finished_at - result.started_at))
        metrics.effects.labels(kind).observe(len(result.file_effects))


def count_proxy_error(reason: str) -> None:
    """Count an error of the network proxy. ``reason`` is one of a fixed set of words (the
    proxy's: ``bad_request``, ``resolve``, ``connect``, ``internal``), never a host or a URL."""
    metrics = _metrics
    if metrics is not None:
        metrics.proxy_errors.labels(reason).inc()


class _RuntimeGauges(Collector):
    """What the runtime knows now, read at each scrape."""

    def __init__(
        self,
        pending_approvals: Callable[[], int],
        workspaces: Callable[[], tuple[WorkspaceStatus, ...]],
    ) -> None:
        self._pending = pending_approvals
        self._workspaces = workspaces

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            pending = self._pending()
        except LedgerError as exc:
            log.warning("metrics: the ledger did not answer", extra={"problem": exc.message})
        else:
            yield GaugeMetricFamily(
                "shellward_approvals_pending", "Calls waiting for a human's approval.", pending
            )
        states = GaugeMetricFamily(
            "shellward_index_workspaces",
            "Workspaces by the state of their file index (ready, indexing, ...).",
            labels=["state"],
        )
        counts: dict[str, int] = {}
        files = 0
        for workspace in self._workspaces():
            counts[workspace.state] = counts.get(workspace.state, 0) + 1
            files += workspace.files_done
        for state, count in sorted(counts.items()):
            states.add_metric([state], count)
        yield states
        yield GaugeMetricFamily(
            "shellward_index_files", "Files indexed, over all workspaces.", files
        )


def serve(
    address: str,
    pending_approvals: Callable[[], int],
    workspaces: Callable[[], tuple[WorkspaceStatus, ...]],
) -> WSGIServer:
    """Start recording, and serve ``/metrics`` on ``address`` (HOST:PORT) from a thread.
    Returns the HTTP server (its ``shutdown()`` stops it)."""
    global _metrics
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    registry.register(_RuntimeGauges(pending_approvals, workspaces))
    metrics = _Metrics(
        registry=registry,
        calls=Counter(
            "shellward_calls",
            "Calls answered, by kind, final status, code and verdict (idempotency class).",
            ["kind", "status", "code", "verdict"],
            registry=registry,
        ),
        durations=Histogram(
            "shellward_call_duration_seconds",
            "How long calls that ran took, from start to end.",
            ["kind"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        ),
        effects=Histogram(
            "shellward_call_file_effects",
            "Files a call that ran created, changed or deleted.",
            ["kind"],
            buckets=_EFFECT_BUCKETS,
            registry=registry,
        ),
        sandbox_errors=Counter(
            "shellward_sandbox_errors",
            "Calls that could not run because the sandbox failed (code SANDBOX_ERROR).",
            registry=registry,
        ),
        proxy_errors=Counter(
            "shellward_proxy_errors",
            "Errors of the network proxy, by reason.",
            ["reason"],
            registry=registry,
        ),
    )
    host, _, port = address.rpartition(":")
    try:
        server, _thread = _start_http_server(int(port), host.strip("[]"), registry=registry)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve metrics on {address}: {exc.strerror or exc}; free the port or pass "
            "another --metrics HOST:PORT"
        ) from exc
    _metrics = metrics
    return server


def stop(server: WSGIServer) -> None:
    """Stop serving and recording."""
    global _metrics
    _metrics = None
    server.shutdown()
    server.server_close()
