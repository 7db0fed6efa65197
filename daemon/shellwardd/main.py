"""``shellwardd``: the daemon's life cycle, in uvicorn's manner: start, serve, shut down.

Choices, and why
- **One object, three phases.** :class:`Daemon` ``startup()`` opens each resource in order
  and registers its release in one ``ExitStack``; ``main_loop()`` serves; ``shutdown()`` is
  a numbered sequence. A failure at any start-up step closes what the earlier steps opened
  (monitors, registry, ledger, the state directory's lock), in reverse order, and exits with
  the step's code (``EXIT_*``) and one line saying why: no traceback for a user's mistake.
- **Start-up order.** The state directory first (private, and locked: one daemon per state
  directory), so that nothing else is touched by a second daemon; then logging into it, the
  sandbox check, the rules, the ledger and its crash recovery, the workspaces' write
  detectors, the business tools, and last the socket, so that no request arrives before
  everything it needs is there; the metrics endpoint after it.
- **Signal handlers only set flags**; the main loop acts on them. A first SIGTERM/SIGINT
  starts a graceful shutdown; a second one skips the grace period; SIGHUP reloads the rule
  files (a broken file keeps the last good rules).
- **The main loop survives the ledger.** Every second it keeps this daemon's lease, sweeps
  lapsed daemons, expires approvals and starts calls approved elsewhere; a busy or failing
  ledger is logged and tried again on the next tick; it never stops the daemon.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from shellward._version import package_version
from shellwardd import logs, metrics, statedir
from shellwardd.classifier import LiveRules, load_rules
from shellwardd.classifier.toolchains import build_toolchains
from shellwardd.config import Config, load_config
from shellwardd.egress.proxy import system_resolver
from shellwardd.errors import (
    ConfigError,
    LedgerError,
    RuleFileError,
    SandboxUnavailable,
    ShellwardError,
    StateError,
)
from shellwardd.ledger import open_ledger
from shellwardd.runtime import Runtime
from shellwardd.sandbox import Sandbox
from shellwardd.server import DaemonInfo, Listeners
from shellwardd.staging.area import StagingArea
from shellwardd.staging.blobs import BlobStore, store_path
from shellwardd.staging.stager import Stager
from shellwardd.tools.config import load_tools_config
from shellwardd.tools.registry import ToolRegistry
from shellwardd.watch import WorkspaceMonitor

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_SANDBOX = 3
EXIT_RULES = 4
EXIT_STATE = 5

# A start-up failure's exit code and how its line begins, by the error's class (first match).
_STARTUP_FAILURES: tuple[tuple[type[ShellwardError], int, str], ...] = (
    (SandboxUnavailable, EXIT_SANDBOX, "refusing to start"),
    (RuleFileError, EXIT_RULES, "refusing to start: broken rule file"),
    (StateError, EXIT_STATE, "refusing to start"),
    (ShellwardError, EXIT_CONFIG, "refusing to start"),
)

log = logging.getLogger("shellwardd")

# How often the main loop bounds the undo store (it also does at start-up).
UNDO_COLLECT_SECONDS = 3600.0


def build_sandbox(config: Config) -> Sandbox:
    """The sandbox ``config`` asks for (not yet checked): the daemon's, and the benchmarks'
    bare side, which must spawn exactly the daemon's profile."""
    return Sandbox(
        enabled=not config.no_sandbox,
        hidden=config.hidden,
        git_writable=config.git_writable,
        sandbox_uid=config.sandbox_uid,
        overlay=config.overlay,
        state_dir=config.state_dir,
        resolver=system_resolver(dict(config.pinned_hosts)),
    )


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


class Daemon:
    """One daemon: what it opened, in one exit stack, and what it serves with."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.signals = _Signals()
        self._resources = contextlib.ExitStack()

    def run(self) -> int:
        """Start, serve until SIGTERM/SIGINT, shut down. Returns an exit code (EXIT_*)."""
        with self._resources:
            try:
                self.startup()
            except ShellwardError as exc:
                code, prefix = next(
                    (code, prefix)
                    for kind, code, prefix in _STARTUP_FAILURES
                    if isinstance(exc, kind)
                )
                print(f"shellwardd: {prefix}: {exc}", file=sys.stderr)
                return code
            self.main_loop()
            self.shutdown()
        return EXIT_OK

    def startup(self) -> None:
        config, resources = self.config, self._resources
        # 1. The state directory: private, and ours alone for as long as we run.
        statedir.prepare_state_dir(config.state_dir)
        resources.callback(statedir.StateDirLock(config.state_dir).close)
        try:
            logs.configure(config.log_level, config.log_path, config.log_format)
        except OSError as exc:
            raise StateError(f"cannot write the log {config.log_path}: {exc.strerror}") from exc

        # 2. The sandbox must work (or be disabled out loud).
        # Before any thread starts: the sandbox sets up the daemon's private mount namespace.
        self.sandbox = build_sandbox(config)
        self.sandbox.check()
        resources.callback(self.sandbox.close)
        if config.no_sandbox:
            log.warning(
                "SANDBOX DISABLED (--no-sandbox): commands run with the daemon's own rights, "
                "with network and full file access"
            )

        # 3. The toolchains on the sandbox's PATH (an operator's venv pinned as it is now),
        #    and the rules; a broken file refuses the start.
        self.toolchains = build_toolchains(
            config.toolchains,
            config.workspaces,
            auto=not config.no_auto_toolchains,
            home=Path.home(),
            reaches=self.sandbox.reaches,
        )
        self.rules = LiveRules(
            lambda: load_rules(
                user_file=config.user_rules,
                repo_roots=config.workspaces,
                trusted_repos=config.trusted_repos,
            ),
            self.toolchains,
        )

        # 4. The ledger (its schema migrated), what this daemon left running before it
        #    restarted, and its lease among the fleet's daemons.
        self.ledger = open_ledger(config.ledger_url, config.identity)
        resources.callback(self.ledger.close)
        # Before calls are marked uncertain: end what they left running (a crashed predecessor's).
        survivors = self.sandbox.reap()
        if survivors:
            log.warning("killed processes left running by a previous daemon",
                        extra={"calls": survivors})  # fmt: skip
        recovered = self.ledger.recover_interrupted("the daemon restarted while the call ran")
        if recovered:
            log.warning("calls left running by a previous daemon are now uncertain",
                        extra={"call_ids": recovered})  # fmt: skip
        self.ledger.renew_lease(config.lease_seconds)
        # Before the workspaces are watched: finish the commits a crash cut short.
        self.stager: Stager | None = None
        if self.sandbox.stages:
            self.stager = Stager(
                StagingArea(
                    config.state_dir / "staging",
                    self.sandbox.mount_root,
                    fuse_markers=self.sandbox.overlay_in_force == "fuse",
                ),
                BlobStore(store_path(config.state_dir)),
                self.ledger,
                self.sandbox.sandbox_owner,
            )
            finished = self.stager.finish_commits()
            if finished:
                log.warning("commits cut short by a previous daemon are finished",
                            extra={"call_ids": finished})  # fmt: skip
            self.stager.forget_uncommitted(recovered)

        # 5. Index every workspace in the background; the first call in one waits for it.
        self.monitors: dict[Path, WorkspaceMonitor] = {}
        for root in config.workspaces:
            monitor = WorkspaceMonitor(root, config.state_dir / "index", config.ignore_globs)
            monitor.start()
            resources.callback(monitor.stop)
            self.monitors[root] = monitor

        # 6. The business tools' MCP servers.
        self.registry: ToolRegistry | None = None
        if config.tools_config is not None:
            self.registry = ToolRegistry(load_tools_config(config.tools_config))
            self.registry.start()
            resources.callback(self.registry.stop)
            for problem in self.registry.problems():
                log.warning("tool registry problem", extra={"problem": problem})

        # 7. Last, the socket: requests may come from here on.
        self.runtime = Runtime(
            config,
            self.ledger,
            self.rules.classify,
            self.sandbox,
            self.monitors,
            self.registry,
            stager=self.stager,
            toolchains=self.toolchains,
        )
        self._collect_undo_images()
        info = DaemonInfo(
            version=package_version(),
            config=config,
            sandbox_enabled=self.sandbox.enabled,
            sandbox_detail=self.sandbox.detail,
            started_at=time.time(),
            containment=self.sandbox.containment(config.limits),
            ledger_location=self.ledger.location,
        )
        statedir.check_socket_dir(config.socket)
        try:
            self.listeners = Listeners(self.runtime, self.rules, info)
            self.listeners.start()
        except RuntimeError as exc:  # grpc cannot bind
            raise ConfigError(f"cannot listen on {config.socket}: {exc}") from exc
        resources.callback(self.listeners.remove_socket)
        if config.tcp and self.listeners.tcp_port:
            # No call reaches the daemon's own TCP port through the proxy, whatever is allowed.
            self.sandbox.guard_port(config.tcp.rpartition(":")[0], self.listeners.tcp_port)

        # 8. Metrics, when asked for: their port is checked like the socket's.
        if config.metrics:
            runtime = self.runtime
            endpoint = metrics.serve(
                config.metrics, lambda: len(runtime.list_approvals()), runtime.workspace_status
            )
            resources.callback(metrics.stop, endpoint)

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self.signals.handle)
        where = f"unix:{config.socket}"
        if config.tcp:
            where += f" and tcp:{config.tcp.rpartition(':')[0]}:{self.listeners.tcp_port}"
        if config.metrics:
            where += f", metrics on http://{config.metrics}/metrics"
        print(f"shellwardd {info.version} listening on {where}", flush=True)
        log.info("serving", extra={"socket": str(config.socket),
                                   "state_dir": str(config.state_dir),
                                   "workspaces": [str(w) for w in config.workspaces]})  # fmt: skip

    def main_loop(self) -> None:
        """Act on SIGHUP, keep the lease, expire unanswered approvals, run calls approved
        on other daemons, until told to stop."""
        while not self.signals.should_exit.wait(timeout=1.0):
            if self.signals.reload:
                self.signals.reload = False
                self.rules.reload()
            if time.monotonic() - self._undo_collected >= UNDO_COLLECT_SECONDS:
                self._collect_undo_images()
            try:
                self.runtime.keep_lease()
                self.runtime.expire_approvals()
                self.runtime.run_approved()
            except LedgerError as exc:
                self.listeners.ledger_answers(False)
                log.warning("the ledger did not answer the main loop; trying again",
                            extra={"problem": exc.message})  # fmt: skip
            else:
                self.listeners.ledger_answers(True)

    def _collect_undo_images(self) -> None:
        """Bound the undo store (never fatal: a store that cannot be collected only grows)."""
        self._undo_collected = time.monotonic()
        try:
            self.runtime.collect_undo_images()
        except (OSError, ShellwardError) as exc:
            log.warning("the undo store could not be collected", extra={"problem": str(exc)})

    def shutdown(self) -> None:
        grace = 0.0 if self.signals.force_exit else self.config.grace_period
        log.info(
            "shutting down", extra={"grace_period": grace, "running": self.runtime.running_count}
        )
        # 1. Refuse new calls, and stop taking new RPCs (in-flight streams keep going).
        self.runtime.stop_accepting()
        done = self.listeners.stop(grace + 5.0)
        # 2. Let running calls finish within the grace period; kill the rest (→ uncertain).
        killed = self.runtime.drain(0.0 if self.signals.force_exit else grace)
        if killed:
            log.warning("killed calls still running after the grace period",
                        extra={"killed": killed})  # fmt: skip
        # 3. Wait for their final answers to be sent.
        for event in done:
            event.wait()
        # 4. The exit stack then removes the socket, stops the tool servers and the write
        #    detectors, closes the ledger and releases the state directory, in that order.
        log.info("stopped")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = load_config(argv)
    except ConfigError as exc:
        print(f"shellwardd: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    return run(config=config)


def run(*, config: Config) -> int:
    """Serve until SIGTERM/SIGINT. Returns an exit code (EXIT_*)."""
    return Daemon(config).run()


if __name__ == "__main__":
    sys.exit(main())
