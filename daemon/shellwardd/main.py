"""``shellwardd``: start-up, serving, and the numbered shutdown sequence.

Signal handlers only set flags; the main loop acts on them. A first SIGTERM/SIGINT
starts a graceful shutdown; a second one skips the grace period; SIGHUP reloads the rule
files (a broken file keeps the last good rules).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from types import FrameType

from shellwardd import logs
from shellwardd.classifier import LiveRules, RuleFileError, load_rules
from shellwardd.classifier.toolchains import toolchains_for
from shellwardd.config import Config, load_config
from shellwardd.errors import ConfigError, ShellwardError
from shellwardd.ledger import Ledger, LedgerError
from shellwardd.runtime import Runtime
from shellwardd.sandbox import Sandbox
from shellwardd.server import DaemonInfo, Listeners
from shellwardd.tools.config import ToolConfigError, load_tools_config
from shellwardd.tools.registry import ToolRegistry
from shellwardd.watch import WorkspaceMonitor

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_SANDBOX = 3
EXIT_RULES = 4
EXIT_STATE = 5

log = logging.getLogger("shellwardd")


def daemon_version() -> str:
    try:
        return version("shellward")
    except PackageNotFoundError:
        return "0+unknown"


class _Signals:
    def __init__(self) -> None:
        self.should_exit = threading.Event()
        self.force_exit = False
        self.reload = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self.reload = True
            return
        if self.should_exit.is_set():
            self.force_exit = True
        self.should_exit.set()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = load_config(argv)
    except ConfigError as exc:
        print(f"shellwardd: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    return run(config=config)


def run(*, config: Config) -> int:
    """Serve until SIGTERM/SIGINT. Returns an exit code (EXIT_*)."""
    logs.configure(config.log_level, config.log_path)

    sandbox = Sandbox(enabled=not config.no_sandbox)
    try:
        sandbox.check()
    except ShellwardError as exc:
        print(f"shellwardd: refusing to start: {exc.message}", file=sys.stderr)
        return EXIT_SANDBOX
    if config.no_sandbox:
        log.warning(
            "SANDBOX DISABLED (--no-sandbox): commands run with the daemon's own rights, "
            "with network and full file access"
        )

    try:
        rules = LiveRules(
            lambda: load_rules(
                user_file=config.user_rules,
                repo_roots=config.workspaces,
                trusted_repos=config.trusted_repos,
            ),
            toolchains_for(config.toolchains, config.workspaces),
        )
    except RuleFileError as exc:
        print(f"shellwardd: refusing to start: broken rule file: {exc}", file=sys.stderr)
        return EXIT_RULES

    try:
        ledger = Ledger(config.ledger_path)
    except LedgerError as exc:
        print(f"shellwardd: {exc}", file=sys.stderr)
        return EXIT_STATE
    recovered = ledger.recover_interrupted("the daemon restarted while the call ran")
    if recovered:
        log.warning("calls left running by a previous daemon are now uncertain",
                    extra={"call_ids": recovered})  # fmt: skip

    # Index every workspace in the background; the first call in one waits for it.
    monitors = {
        root: WorkspaceMonitor(root, config.state_dir / "index", config.ignore_globs)
        for root in config.workspaces
    }
    for monitor in monitors.values():
        monitor.start()
    registry = None
    if config.tools_config is not None:
        try:
            registry = ToolRegistry(load_tools_config(config.tools_config))
        except ToolConfigError as exc:
            print(f"shellwardd: refusing to start: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        registry.start()
        for problem in registry.problems():
            log.warning("tool registry problem", extra={"problem": problem})
    runtime = Runtime(config, ledger, rules.classify, sandbox, monitors, registry)
    info = DaemonInfo(
        version=daemon_version(),
        config=config,
        sandbox_enabled=sandbox.enabled,
        sandbox_detail=sandbox.detail,
        started_at=time.time(),
    )
    try:
        listeners = Listeners(runtime, rules, info)
        listeners.start()
    except (ShellwardError, RuntimeError) as exc:
        print(f"shellwardd: cannot listen: {exc}", file=sys.stderr)
        for monitor in monitors.values():
            monitor.stop()
        ledger.close()
        return EXIT_CONFIG

    signals = _Signals()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signals.handle)
    where = f"unix:{config.socket}"
    if config.tcp:
        where += f" and tcp:{config.tcp.rpartition(':')[0]}:{listeners.tcp_port}"
    print(f"shellwardd {info.version} listening on {where}", flush=True)
    log.info("serving", extra={"socket": str(config.socket), "state_dir": str(config.state_dir),
                               "workspaces": [str(w) for w in config.workspaces]})  # fmt: skip

    # The main loop: act on SIGHUP, expire unanswered approvals, until told to stop.
    while not signals.should_exit.wait(timeout=1.0):
        if signals.reload:
            signals.reload = False
            rules.reload()
        runtime.expire_approvals()
    _shutdown(config, runtime, listeners, ledger, signals)
    for monitor in monitors.values():
        monitor.stop()
    if registry is not None:
        registry.stop()
    return EXIT_OK


def _shutdown(
    config: Config, runtime: Runtime, listeners: Listeners, ledger: Ledger, signals: _Signals
) -> None:
    grace = 0.0 if signals.force_exit else config.grace_period
    log.info("shutting down", extra={"grace_period": grace, "running": runtime.running_count})
    # 1. Refuse new calls, and stop taking new RPCs (in-flight streams keep going).
    runtime.stop_accepting()
    done = listeners.stop(grace + 5.0)
    # 2. Let running calls finish within the grace period; kill the rest (→ uncertain).
    killed = runtime.drain(0.0 if signals.force_exit else grace)
    if killed:
        log.warning("killed calls still running after the grace period", extra={"killed": killed})
    # 3. Wait for their final answers to be sent, then release the socket and the ledger.
    for event in done:
        event.wait()
    listeners.remove_socket()
    ledger.close()
    log.info("stopped")


if __name__ == "__main__":
    sys.exit(main())
