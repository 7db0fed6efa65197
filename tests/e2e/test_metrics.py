"""``--metrics``: a Prometheus endpoint whose numbers move with the calls, whose labels never
carry a command's text, a path or an id, and which refuses to listen beyond loopback unless
told to."""

from __future__ import annotations

import signal
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shellwardd import metrics
from shellwardd.config import load_config
from shellwardd.errors import ConfigError
from tests.helpers import Daemon, start_daemon, wait_for


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _scrape(address: str) -> tuple[str, dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return text, samples


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
           **labels: str) -> float:  # fmt: skip
    return samples.get((name, frozenset(labels.items())), 0.0)


def _calls(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], **labels: str) -> float:
    """Command calls whose labels include ``labels``, summed over the others."""
    wanted = {("kind", "command"), *labels.items()}
    return sum(
        value
        for (name, have), value in samples.items()
        if name == "shellward_calls_total" and wanted <= have
    )


@pytest.fixture
def metrics_daemon(tmp_path: Path, workspace: Path) -> Iterator[tuple[Daemon, str]]:
    address = f"127.0.0.1:{_free_port()}"
    handle = start_daemon(
        tmp_path / "run" / "s.sock", tmp_path / "state", workspace, "--metrics", address
    )
    yield handle, address
    handle.stop(signal.SIGKILL)


def test_the_endpoint_counts_calls_without_their_text(
    metrics_daemon: tuple[Daemon, str],
) -> None:
    daemon, address = metrics_daemon
    assert f"metrics on http://{address}/metrics" in daemon.banner
    _, before = _scrape(address)
    assert _value(before, "shellward_approvals_pending") == 0
    with daemon.client() as client:
        assert client.run_command("echo secret-marker-1 > made-by-marker.txt").ok
        assert client.run_command("cat made-by-marker.txt").ok
        assert not client.run_command("exit 3").ok
        pending = client.run_command("sudo touch marker-approval.txt")
        assert pending.code.value == "NEEDS_APPROVAL"
        text, after = _scrape(address)
        client.approve(pending.call_id)
        approved = client.wait_call(pending.call_id, timeout=60)
        # Counted just after the ledger has its end: wait for the count, not for the call.
        wait_for(lambda: _value(_scrape(address)[1], "shellward_call_duration_seconds_count",
                                kind="command") == 4)  # fmt: skip
        _, last = _scrape(address)

    assert _calls(after, code="OK", status="succeeded") == 2
    assert _calls(after, code="COMMAND_FAILED", status="failed") == 1
    assert _calls(after, code="NEEDS_APPROVAL") == 1
    assert _value(after, "shellward_call_duration_seconds_count", kind="command") == 3
    # The first call created one file: one call in the histogram's bucket for 1 but not 0.
    assert _value(after, "shellward_call_file_effects_bucket", kind="command", le="0.0") == 2
    assert _value(after, "shellward_call_file_effects_sum", kind="command") == 1
    assert _value(after, "shellward_approvals_pending") == 1
    assert _value(after, "shellward_index_workspaces", state="ready") == 1
    assert _value(after, "process_resident_memory_bytes") > 0
    # The approved run is counted when it ends (sudo has no rights in the sandbox).
    assert _value(last, "shellward_approvals_pending") == 0
    assert (
        _calls(last, code=approved.code.value, status=approved.status.value)
        == _calls(after, code=approved.code.value, status=approved.status.value) + 1
    )
    # Privacy and cardinality: nothing a command said, no path, no id.
    for leak in ("marker", pending.call_id, str(daemon.workspace), "sudo"):
        assert leak not in text


def test_proxy_errors_are_counted_by_reason_and_cost_nothing_when_off() -> None:
    metrics.count_proxy_error("denied")  # off: nothing to count into, and no error
    address = f"127.0.0.1:{_free_port()}"
    server = metrics.serve(address, lambda: 0, lambda: ())
    try:
        metrics.count_proxy_error("denied")
        metrics.count_proxy_error("denied")
        metrics.count_proxy_error("upstream")
        _, samples = _scrape(address)
    finally:
        metrics.stop(server)
    assert _value(samples, "shellward_proxy_errors_total", reason="denied") == 2
    assert _value(samples, "shellward_proxy_errors_total", reason="upstream") == 1
    metrics.count_proxy_error("denied")  # off again


def test_a_taken_metrics_port_refuses_the_start(tmp_path: Path, workspace: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(RuntimeError, match="cannot serve metrics on"):
            start_daemon(
                tmp_path / "run" / "s.sock", tmp_path / "state", workspace, "--metrics", address
            )


@pytest.mark.parametrize("address", ["0.0.0.0:9464", "[::]:9464", "metrics.example:9464"])
def test_metrics_beyond_loopback_need_an_explicit_yes(address: str, workspace: Path) -> None:
    with pytest.raises(ConfigError, match="--metrics-allow-remote"):
        load_config(["--workspace", str(workspace), "--metrics", address], env={})
    config = load_config(
        ["--workspace", str(workspace), "--metrics", address, "--metrics-allow-remote"], env={}
    )
    assert config.metrics == address


@pytest.mark.parametrize("address", ["127.0.0.1:9464", "localhost:9464", "[::1]:9464"])
def test_loopback_metrics_need_no_flag(address: str, workspace: Path) -> None:
    config = load_config(["--workspace", str(workspace), "--metrics", address], env={})
    assert config.metrics == address


def test_a_malformed_metrics_address_says_the_form(workspace: Path) -> None:
    with pytest.raises(ConfigError, match="HOST:PORT"):
        load_config(["--workspace", str(workspace), "--metrics", "9464"], env={})
