"""Running one command in a bubblewrap sandbox, streaming and capping its output.

The profile (DESIGN.md, Sandbox): read-only root, the workspace bound read-write, a private
``/tmp``, every namespace unshared (network too, unless granted), ``--die-with-parent``,
``--new-session``, the user's secret directories and the daemon's own state hidden, and
rlimits applied with ``prlimit`` before bwrap starts so that the whole tree inherits them.

The pid namespace is what makes a kill complete: killing bwrap kills its init, and the
kernel then kills every process left in the namespace, ``sleep &`` children included.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from shellward.types import CapturedOutput, OutputChunk, Stream
from shellwardd.config import Limits
from shellwardd.errors import SandboxUnavailable

# Hidden from every command: credentials an agent's command has no business reading.
SECRET_HOME_ENTRIES = (
    ".ssh", ".aws", ".azure", ".gnupg", ".docker", ".kube", ".config/gcloud", ".config/gh",
    ".netrc", ".npmrc", ".pypirc", ".git-credentials", ".config/hub",
)  # fmt: skip

BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# After the command exits, how long to wait for stray writers to close the pipes.
_DRAIN_SECONDS = 2.0


@dataclass(frozen=True)
class SandboxSpec:
    """Everything that decides how one command runs."""

    command: str
    workspace: Path
    cwd: Path
    env: Mapping[str, str]
    network: bool
    timeout: float
    limits: Limits
    output_cap: int
    # Extra paths to hide (the daemon's state dir and socket dir).
    hidden: Sequence[Path] = ()
    # Paths inside the workspace the command may read but not write (the write
    # detector's cookie directory: a forged cookie would close a call's window early).
    read_only: Sequence[Path] = ()
    # The operator's toolchain directories: first on PATH, and read-only even inside the
    # workspace, so that no command can replace the program a later `pytest` runs.
    toolchains: Sequence[Path] = ()


@dataclass(frozen=True)
class ProcessOutcome:
    """What happened to the process. ``started`` is False when the sandbox itself failed."""

    started: bool
    exit_code: int | None
    timed_out: bool
    cancelled: bool
    stdout: CapturedOutput
    stderr: CapturedOutput
    sandbox_error: str = ""
    duration: float = 0.0


class _Capture:
    """Keeps the first ``cap`` bytes of a stream, counts and hashes all of it."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._kept = bytearray()
        self._total = 0
        self._digest = hashlib.sha256()

    def add(self, data: bytes) -> bytes:
        """Record ``data``; return the part that fits under the cap (what to stream)."""
        self._total += len(data)
        self._digest.update(data)
        room = self._cap - len(self._kept)
        kept = data[: max(room, 0)]
        self._kept += kept
        return kept

    def result(self) -> CapturedOutput:
        return CapturedOutput(
            data=bytes(self._kept),
            total_bytes=self._total,
            truncated=self._total > len(self._kept),
            sha256=f"sha256:{self._digest.hexdigest()}",
        )


class Sandbox:
    """Builds and runs the bwrap command line; ``enabled=False`` runs bare (--no-sandbox)."""

    def __init__(self, *, enabled: bool = True, home: Path | None = None) -> None:
        self.enabled = enabled
        self._home = home or Path.home()
        self._bash = shutil.which("bash") or "/bin/sh"
        self._prlimit = shutil.which("prlimit")
        self._bwrap = shutil.which("bwrap") if enabled else None
        self.detail = "disabled (--no-sandbox): commands run with the daemon's own rights"

    def check(self) -> None:
        """Fail with a clear message unless the sandbox can really run a command."""
        if self._prlimit is None:
            raise SandboxUnavailable(
                "prlimit (util-linux) is missing; install util-linux to apply resource limits"
            )
        if not self.enabled:
            return
        if self._bwrap is None:
            raise SandboxUnavailable(
                "bubblewrap (bwrap) is not installed, so commands cannot be sandboxed. "
                "Install it (apt-get install bubblewrap) or start with --no-sandbox to run "
                "commands without isolation."
            )
        probe = subprocess.run(
            [self._bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode != 0:
            raise SandboxUnavailable(
                f"bwrap is installed but cannot create a sandbox here: {probe.stderr.strip()} "
                "(user namespaces may be disabled: check kernel.unprivileged_userns_clone, or "
                "run the daemon as root). Use --no-sandbox only if you accept no isolation."
            )
        version = subprocess.run(
            [self._bwrap, "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
        self.detail = f"{version} at {self._bwrap}"

    def argv(self, spec: SandboxSpec, status_fd: int | None) -> list[str]:
        """The full command line: prlimit, then bwrap with the profile, then bash -c."""
        argv = [str(self._prlimit), *_prlimit_args(spec.limits), "--"]
        if self.enabled:
            argv += [str(self._bwrap), *self._bwrap_args(spec)]
            if status_fd is not None:
                argv += ["--json-status-fd", str(status_fd)]
            argv.append("--")
        argv += [self._bash, "-c", spec.command]
        return argv

    def _bwrap_args(self, spec: SandboxSpec) -> list[str]:
        args = [
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--tmpfs", "/tmp",
            "--tmpfs", "/var/tmp",
            "--bind", str(spec.workspace), str(spec.workspace),
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
        ]  # fmt: skip
        if spec.network:
            args.append("--share-net")
        for name in SECRET_HOME_ENTRIES:
            path = self._home / name
            if _is_inside(path, spec.workspace):
                continue
            if path.is_dir():
                args += ["--tmpfs", str(path)]
            elif path.exists():
                args += ["--ro-bind", "/dev/null", str(path)]
        for path in spec.hidden:
            if path.is_dir() and not _is_inside(spec.workspace, path):
                args += ["--tmpfs", str(path)]
        for path in (*spec.read_only, *spec.toolchains):
            if path.exists():
                args += ["--ro-bind", str(path), str(path)]
        args += ["--chdir", str(spec.cwd)]
        return args

    def run(
        self,
        spec: SandboxSpec,
        on_output: Callable[[OutputChunk], None],
        cancel: threading.Event,
        on_spawn: Callable[[], None] | None = None,
    ) -> ProcessOutcome:
        """Run to completion, timeout or cancellation; never raises for the command's faults."""
        status_read, status_write = os.pipe() if self.enabled else (None, None)
        path = ":".join([*map(str, spec.toolchains), BASE_PATH])
        env = {"PATH": path, "LANG": "C.UTF-8", "HOME": str(self._home), "TERM": "dumb"}
        env.update(spec.env)
        start = time.monotonic()
        try:
            process = subprocess.Popen(
                self.argv(spec, status_write),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=spec.cwd,
                env=env,
                # Without bwrap, the command gets its own process group so that a kill
                # reaches its children. With bwrap the pid namespace does that, and no
                # new session lets CPython spawn with vfork: a few ms less per call.
                start_new_session=not self.enabled,
                pass_fds=(status_write,) if status_write is not None else (),
            )
        except OSError as exc:
            for fd in (status_read, status_write):
                if fd is not None:
                    os.close(fd)
            return ProcessOutcome(
                started=False, exit_code=None, timed_out=False, cancelled=False,
                stdout=CapturedOutput(), stderr=CapturedOutput(),
                sandbox_error=f"could not start the sandbox: {exc}",
            )  # fmt: skip
        if status_write is not None:
            os.close(status_write)
        if on_spawn:
            on_spawn()

        captures = {
            Stream.STDOUT: _Capture(spec.output_cap),
            Stream.STDERR: _Capture(spec.output_cap),
        }
        timed_out, cancelled = _pump(
            process, captures, on_output, start + spec.timeout, cancel, group=not self.enabled
        )
        exit_code = process.wait()
        duration = time.monotonic() - start

        started, inner_exit = True, exit_code
        if status_read is not None:
            started, inner_exit = _read_status(status_read, exit_code)
        stderr = captures[Stream.STDERR].result()
        # A killed command has no exit status of its own.
        final_exit = None if timed_out or cancelled or not started else inner_exit
        return ProcessOutcome(
            started=started,
            exit_code=final_exit,
            timed_out=timed_out,
            cancelled=cancelled,
            stdout=captures[Stream.STDOUT].result(),
            stderr=stderr,
            sandbox_error="" if started else stderr.text.strip() or f"bwrap exited {exit_code}",
            duration=duration,
        )


def _pump(
    process: subprocess.Popen[bytes],
    captures: dict[Stream, _Capture],
    on_output: Callable[[OutputChunk], None],
    deadline: float,
    cancel: threading.Event,
    *,
    group: bool,
) -> tuple[bool, bool]:
    """Copy output until both pipes close; kill the tree on deadline or cancel."""
    selector = selectors.DefaultSelector()
    assert process.stdout is not None and process.stderr is not None
    selector.register(process.stdout, selectors.EVENT_READ, Stream.STDOUT)
    selector.register(process.stderr, selectors.EVENT_READ, Stream.STDERR)
    timed_out = cancelled = False
    drain_deadline: float | None = None
    try:
        while selector.get_map():
            now = time.monotonic()
            if not timed_out and not cancelled:
                if now >= deadline:
                    timed_out = True
                    _kill(process, group)
                elif cancel.is_set():
                    cancelled = True
                    _kill(process, group)
            if drain_deadline is None and process.poll() is not None:
                drain_deadline = now + _DRAIN_SECONDS
            if drain_deadline is not None and now >= drain_deadline:
                # The command exited but something still holds the pipes (possible only
                # without the pid namespace): kill its process group and stop reading.
                _kill(process, group)
                break
            wait = min(max(deadline - now, 0.0), 0.2)
            for key, _ in selector.select(wait):
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                kept = captures[key.data].add(data)
                if kept:
                    on_output(OutputChunk(key.data, kept))
    finally:
        selector.close()
        process.stdout.close()
        process.stderr.close()
    return timed_out, cancelled


def _kill(process: subprocess.Popen[bytes], group: bool) -> None:
    """SIGKILL the process (with bwrap, its pid namespace dies with it) or its group."""
    with contextlib.suppress(ProcessLookupError):
        if group:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()


def _read_status(fd: int, bwrap_exit: int) -> tuple[bool, int]:
    """Parse bwrap's --json-status-fd: did the command start, and its own exit code."""
    with os.fdopen(fd, "rb") as stream:
        raw = stream.read()
    started, exit_code = False, bwrap_exit
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "child-pid" in record:
            started = True
        if "exit-code" in record:
            exit_code = int(record["exit-code"])
    return started, exit_code


def _prlimit_args(limits: Limits) -> list[str]:
    pairs = (
        ("--cpu", limits.cpu_seconds),
        ("--as", limits.address_space_bytes),
        ("--nproc", limits.max_processes),
        ("--fsize", limits.file_size_bytes),
    )
    return [f"{flag}={value}:{value}" for flag, value in pairs if value > 0]


def _is_inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
