"""Running one command in a bubblewrap sandbox, streaming and capping its output.

The profile is :mod:`.profile`'s; this module starts it and ends it. Choices, and why:

- **The child joins its call's cgroup before anything else runs**, then ``setpriv`` sets
  the parent-death signal and (root daemon) drops to the sandbox uid: whatever runs after
  that point is in the call's cgroup, so if the daemon dies before the parent-death
  signal is armed (or bwrap's own, which it sets only once started), the next start-up
  kills it exactly.
- **A kill is complete.** The call's cgroup is killed (``cgroup.kill``); the pid
  namespace's init (its pid comes from ``--json-status-fd`` as soon as bwrap starts) is
  killed too, which takes every process of the namespace with it even without a cgroup
  and even if a command cleared its parent-death signal. When the call ends for any
  reason its cgroup is killed and removed.
- **rlimits** are applied with ``prlimit`` before bwrap starts so that the whole tree
  inherits them; without cgroups they are the only process and memory bound.
- **Staged writes: kernel overlayfs, else fuse-overlayfs** (``--overlay``; auto takes the
  first whose start-up probe mounts). Both are mounted in the call's own mount namespace
  before setpriv and bwrap, so the command holds no capability either way and sees neither
  the mount's making nor, in its pid namespace, the fuse-overlayfs daemon. That daemon
  outlives the mount step by design: it is in the call's cgroup, which is killed when the
  call ends, and the mount namespace (and the mount) goes with it. Without a cgroup per call
  only the removal of the mount point (which detaches the mount in the call's namespace,
  and so ends fuse-overlayfs) would, later and less surely: fuse is refused there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
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

from shellward.types import CapturedOutput, ContainmentControl, NetworkEffect, OutputChunk, Stream
from shellwardd.config import DEFAULT_HIDDEN, Limits
from shellwardd.egress import relay
from shellwardd.egress.policy import EgressPolicy
from shellwardd.egress.proxy import CallEgress, EgressProxy, Resolver, system_resolver
from shellwardd.errors import SandboxUnavailable
from shellwardd.sandbox.cgroup import CallCgroup, Cgroups
from shellwardd.sandbox.idmap import (
    IdmapError,
    IdmappedWorkspaces,
    mount_root,
    private_mount_namespace,
    remove_stale,
)
from shellwardd.sandbox.profile import (
    BASE_ENV,
    HiddenEntries,
    Identity,
    bwrap_args,
    git_protected,
    sandbox_path,
)
from shellwardd.sandbox.seccomp import Filter, SeccompUnavailable, build_filter
from shellwardd.staging.area import StagedDirs, StagingArea, StagingError

# After the command exits, how long to wait for stray writers to close the pipes.
_DRAIN_SECONDS = 2.0
# The workspace of the start-up probe (nothing is written there).
_PROBE = Path("/tmp")
_PRIVATE_TMP = (Path("/tmp"), Path("/var/tmp"))
# Run by /bin/sh as "shellward-spawn N FILE... COMMAND...": write 0 (itself) into N
# cgroup.procs files, then exec COMMAND. A shell, not Python code between fork and exec:
# the daemon is threaded (gRPC), and a forked copy of it crashes now and then.
_JOIN_AND_EXEC = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo 0 > "$1" || exit 125; shift; n=$((n-1)); '
    'done; exec "$@"'
)
# Run by /bin/sh, as root of the call's new mount namespace, as
# "shellward-overlay OPTIONS MOUNTPOINT COMMAND...": mount the call's overlay, then exec.
_MOUNT_AND_EXEC = 'mount -t overlay shellward -o "$1" "$2" || exit 125; shift 2; exec "$@"'
# The same with fuse-overlayfs, as "shellward-fuse FUSE_OVERLAYFS OPTIONS MOUNTPOINT
# COMMAND...". It stays behind as a daemon (in the call's cgroup, which ends it with the
# call); its messages are kept for a failure only: a warning it prints on every mount
# ("unknown argument ignored") is not the command's output.
_FUSE_AND_EXEC = (
    'err=$("$1" -o "$2" "$3" 2>&1) || { echo "fuse-overlayfs: $err" >&2; exit 125; }; '
    'shift 3; exec "$@"'
)
# What --overlay may name (auto tries them in this order).
OVERLAYS = ("kernel", "fuse")


@dataclass(frozen=True)
class SandboxSpec:
    """Everything that decides how one command runs."""

    command: str
    workspace: Path
    cwd: Path
    env: Mapping[str, str]
    # The call's allow-list; None: no network at all.
    network: EgressPolicy | None
    timeout: float
    limits: Limits
    output_cap: int
    # Extra paths to hide (the daemon's state dir and socket dir).
    hidden: Sequence[Path] = ()
    # Paths inside the workspace the command may read but not write (the write
    # detector's cookie directory: a forged cookie would close a call's window early).
    read_only: Sequence[Path] = ()
    # The call's toolchain directories (the operator's, the workspace's, the user's), first
    # on PATH in this order, and read-only even inside the workspace, so that no command
    # can replace the program a later `pytest` runs.
    toolchains: Sequence[Path] = ()
    # The command's standard input (b"": /dev/null).
    stdin: bytes = b""
    # The call's overlay (staged writes); None: the command writes the workspace directly.
    staged: StagedDirs | None = None

    @property
    def base_env(self) -> dict[str, str]:
        """What the command's environment starts from, before the request's variables."""
        return {**BASE_ENV, "PATH": sandbox_path(self.toolchains)}


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
    # What the call asked the proxy for (empty without network).
    network_effects: tuple[NetworkEffect, ...] = ()


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

    def __init__(
        self,
        *,
        enabled: bool = True,
        home: Path | None = None,
        hidden: Sequence[str] = DEFAULT_HIDDEN,
        git_writable: bool = False,
        sandbox_uid: int = 65534,
        overlay: str = "auto",
        state_dir: Path | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        self.enabled = enabled
        self._home = home or Path.home()
        self._hidden = tuple(hidden)
        self._hidden_entries = HiddenEntries.of(self._home, self._hidden)
        self._git_writable = git_writable
        self._bash = shutil.which("bash") or "/bin/sh"
        self._prlimit = shutil.which("prlimit")
        self._setpriv = shutil.which("setpriv")
        self._env = shutil.which("env") or "/usr/bin/env"
        self._unshare = shutil.which("unshare")
        self._mount = shutil.which("mount")
        self._fuse_overlayfs = shutil.which("fuse-overlayfs")
        # Which overlays check() may choose, and the one it chose.
        self._overlays = OVERLAYS if overlay == "auto" else (overlay,)
        self._overlay_in_force = self._overlays[0]
        self._bwrap = shutil.which("bwrap") if enabled else None
        self._as_root = enabled and os.geteuid() == 0
        self._identity = (
            Identity(sandbox_uid, sandbox_uid)
            if self._as_root
            else Identity(os.getuid(), os.getgid())
        )
        # Names the daemon's cgroups and mounts, so that a restart finds its predecessor's.
        key = state_dir or Path(f"/proc/{os.getpid()}/{id(self)}")
        self._key = key
        # Where calls' writes are staged (None: a sandbox without a state dir, for tests
        # of the sandbox alone, writes the workspace directly).
        self._staging = state_dir / "staging" if state_dir else None
        self._cgroups: Cgroups | None = None  # detected by check()
        self._views = IdmappedWorkspaces(mount_root(key), sandbox_uid, sandbox_uid)
        self._filter: Filter | None = None
        self._private_mounts = False
        # The proxy every networked call leaves through (started with the first one).
        self._resolver = resolver or system_resolver({})
        self._proxy: EgressProxy | None = None
        self._proxy_lock = threading.Lock()
        self._daemon_ports: frozenset[tuple[str, int]] = frozenset()
        self.detail = "disabled (--no-sandbox): commands run with the daemon's own rights"

    def reaches(self, path: Path) -> bool:
        """Can the sandbox's user traverse every directory above ``path``? (Only a root
        daemon's, an unprivileged uid, can fail: it decides which toolchains join PATH.)"""
        return not self._as_root or self._identity.reaches(path)

    def check(self) -> None:
        """Fail with a clear message unless the sandbox can really run a command."""
        if self._prlimit is None or self._setpriv is None:
            raise SandboxUnavailable(
                "prlimit or setpriv (util-linux) is missing; install util-linux to apply "
                "resource limits and the parent-death signal"
            )
        if not self.enabled:
            return
        if self._bwrap is None:
            raise SandboxUnavailable(
                "bubblewrap (bwrap) is not installed, so commands cannot be sandboxed. "
                "Install it (apt-get install bubblewrap) or start with --no-sandbox to run "
                "commands without isolation."
            )
        self._cgroups = Cgroups.detect(self._key)
        if self._as_root:
            self._private_mounts = private_mount_namespace()
        try:
            self._filter = build_filter()
        except SeccompUnavailable as exc:
            raise SandboxUnavailable(
                f"cannot build the seccomp filter: {exc}. Use --no-sandbox only if you "
                "accept no isolation."
            ) from None
        probe = self.run(
            SandboxSpec("true", _PROBE, _PROBE, {}, None, 30.0, Limits(), 4096),
            lambda chunk: None,
            threading.Event(),
        )
        if not probe.started or probe.exit_code != 0:
            raise SandboxUnavailable(
                f"bwrap is installed but cannot create a sandbox here: {probe.sandbox_error} "
                "(user namespaces may be disabled: check kernel.unprivileged_userns_clone "
                "and user.max_user_namespaces). Use --no-sandbox only if you accept no "
                "isolation."
            )
        self._check_overlay()
        version = subprocess.run(
            [self._bwrap, "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
        self.detail = f"{version} at {self._bwrap}"

    def _check_overlay(self) -> None:
        """Choose the first overlay (``--overlay``) a staged call can mount here; fail
        closed, naming every cause, if none can."""
        if self._staging is None:
            return
        causes = []
        for overlay in self._overlays:
            cause = self._probe_overlay(overlay, StagingArea(self._staging, self.mount_root))
            if not cause:
                self._overlay_in_force = overlay
                return
            causes.append(cause)
        raise SandboxUnavailable(
            "cannot mount the overlay that stages each command's writes: "
            + "; ".join(causes)
            + ". Choose another --state-dir or --overlay, or use --no-sandbox only if you "
            "accept no isolation."
        )

    def _probe_overlay(self, overlay: str, area: StagingArea) -> str:
        """Why a staged call cannot mount ``overlay`` here ("" if it can)."""
        if overlay == "fuse":
            if self._fuse_overlayfs is None:
                return "fuse-overlayfs is not installed (apt-get install fuse-overlayfs)"
            if self._cgroups is None:
                # Nothing but the mount point's removal, later, would end its daemon.
                return (
                    "fuse-overlayfs needs a cgroup per call to end it with the call, and "
                    "the daemon may create none here"
                )
        self._overlay_in_force = overlay  # what run() mounts
        try:
            dirs = area.create(f"probe-{os.getpid()}", _PROBE, self.sandbox_owner)
        except StagingError as exc:
            return str(exc)
        try:
            probe = self.run(
                SandboxSpec("true", _PROBE, _PROBE, {}, None, 30.0, Limits(), 4096, staged=dirs),
                lambda chunk: None,
                threading.Event(),
            )
        finally:
            area.discard(dirs)
        if probe.started and probe.exit_code == 0:
            return ""
        error = (probe.sandbox_error or probe.stderr.text).strip()
        if overlay == "fuse":
            return f"fuse-overlayfs in the call's mount namespace failed: {error}"
        return (
            f"kernel overlayfs in the call's mount namespace failed: {error} (it needs Linux "
            "5.11+ with overlayfs, and a state directory on a file system overlayfs accepts "
            "as an upper layer, not overlayfs or NFS)"
        )

    def _prlimit_args(self, limits: Limits) -> list[str]:
        pids = self._cgroups is not None and "pids" in self._cgroups.limited
        return _prlimit_args(limits, per_call_pids=pids)

    def containment(self, limits: Limits) -> tuple[ContainmentControl, ...]:
        """What is in force, control by control (for ``shellward status``)."""
        if not self.enabled:
            return (ContainmentControl("sandbox", "NONE (--no-sandbox)"),)
        who = f"host uid {self._identity.uid}"
        if self._as_root:
            where = "private" if self._private_mounts else "host"
            who += f" (root daemon: idmapped workspaces, {where} mount namespace)"
        processes = (
            self._cgroups.summary
            if self._cgroups
            else "rlimits only (no cgroup the daemon may create); kill via the pid namespace"
        )
        pairs = (
            ("user namespace", f"yes; commands run as {who}"),
            ("capabilities", "none (--cap-drop ALL, nested user namespaces disabled)"),
            ("seccomp", self._filter.summary if self._filter else "not built"),
            ("processes", processes),
            ("rlimits", " ".join(self._prlimit_args(limits)) or "none"),
            ("tmpfs", f"/tmp and /var/tmp {limits.tmp_bytes:,} bytes each"),
            ("env", "request variables set inside only (--clearenv, --setenv)"),
            (".git", "hooks and config writable" if self._git_writable else
             "hooks and config read-only"),
            ("hidden", ", ".join(self._hidden) or "-"),
            ("workspace writes", self.staging_mechanism),
        )  # fmt: skip
        return tuple(ContainmentControl(control, state) for control, state in pairs)

    def reap(self) -> int:
        """End what a crashed predecessor left: its call cgroups, its workspace mounts."""
        found = self._cgroups.reap() if self._cgroups else 0
        if self._as_root:
            remove_stale(self._views.root)
        return found

    def close(self) -> None:
        """At shutdown, after the last call: remove the workspace mounts and cgroups."""
        if self._proxy is not None:
            self._proxy.close()
        if self._as_root:
            self._views.close()
        if self._cgroups is not None:
            self._cgroups.close()

    @property
    def stages(self) -> bool:
        """Whether commands run with their writes staged in an overlay."""
        return self.enabled and self._staging is not None

    @property
    def staging_mechanism(self) -> str:
        """How a command's writes reach the workspace (``shellward status``)."""
        if not self.enabled:
            return "direct (no sandbox)"
        if self._overlay_in_force == "fuse":
            where = "as root" if self._as_root else "in a user namespace"
            what = f"fuse-overlayfs ({self._fuse_overlayfs}) per call, ended with it"
        else:
            where = "as root" if self._as_root else "in a user namespace (userxattr)"
            what = "kernel overlayfs per call"
        return f"staged: {what}, mounted {where}; committed after the command exits"

    @property
    def overlay_in_force(self) -> str:
        """The overlay staged calls mount (``OVERLAYS``), chosen by :meth:`check`."""
        return self._overlay_in_force

    @property
    def mount_root(self) -> Path | None:
        """Where a root daemon mounts calls' overlays (reachable by the sandbox user)."""
        return self._views.root if self._as_root else None

    @property
    def sandbox_owner(self) -> tuple[int, int] | None:
        """Who a staged upper root must belong to (a root daemon's sandbox user)."""
        return (self._identity.uid, self._identity.gid) if self._as_root else None

    def _spawn_prefix(self, cgroup: CallCgroup | None, overlay: Sequence[str]) -> list[str]:
        """sh joins the call's cgroup, the call's overlay is mounted (``overlay``), then
        setpriv drops to the sandbox uid (root daemon) and sets the parent-death signal:
        all before prlimit and bwrap run."""
        joins = cgroup.join_files() if cgroup else ()
        prefix = ["/bin/sh", "-c", _JOIN_AND_EXEC, "shellward-spawn", str(len(joins)), *joins]
        prefix += [*overlay, str(self._setpriv)]
        if self._as_root:
            uid, gid = str(self._identity.uid), str(self._identity.gid)
            prefix += ["--reuid", uid, "--regid", gid, "--clear-groups"]
        return [*prefix, "--pdeathsig", "KILL", "--"]

    def guard_port(self, host: str, port: int) -> None:
        """The daemon listens on ``host:port``: refuse it to every call's traffic."""
        host = host.strip("[]")
        self._daemon_ports |= {(host, port)}

    def _egress(self, policy: EgressPolicy) -> CallEgress:
        policy = dataclasses.replace(policy, daemon_ports=policy.daemon_ports | self._daemon_ports)
        with self._proxy_lock:
            if self._proxy is None:
                owner = self._identity.uid if self._as_root else None
                self._proxy = EgressProxy(self._resolver, owner)
        return self._proxy.open(policy)

    @functools.cached_property
    def _python(self) -> str:
        """The relay's interpreter, found when a call first needs network."""
        try:
            return relay.python()
        except FileNotFoundError as exc:
            raise SandboxUnavailable(
                f"{exc}: commands that need network cannot run (install python3)"
            ) from None

    def _overlay(self, spec: SandboxSpec, lower: Path) -> list[str]:
        """The steps that mount the call's overlay in a mount namespace of its own (which
        ends with the call: nothing to unmount, even after a crash). A root daemon mounts
        it as root; any other in a user namespace of its own (``userxattr``)."""
        if spec.staged is None:
            return []
        if self._unshare is None or self._mount is None:
            raise SandboxUnavailable(
                "unshare or mount (util-linux) is missing; install util-linux to stage writes"
            )
        unshare = [self._unshare, "--mount", "--propagation", "private"]
        if not self._as_root:
            unshare[1:1] = ["--user", "--map-root-user"]
        mountpoint = str(spec.staged.mountpoint)
        try:
            if self._overlay_in_force == "fuse":
                assert self._fuse_overlayfs is not None  # checked by _probe_overlay
                options = spec.staged.fuse_options(lower)
                return [*unshare, "--", "/bin/sh", "-c", _FUSE_AND_EXEC, "shellward-fuse",
                        self._fuse_overlayfs, options, mountpoint]  # fmt: skip
            options = spec.staged.options(lower, userxattr=not self._as_root)
        except StagingError as exc:
            raise SandboxUnavailable(str(exc)) from None
        return [*unshare, "--", "/bin/sh", "-c", _MOUNT_AND_EXEC, "shellward-overlay",
                options, mountpoint]  # fmt: skip

    def _profile(self, spec: SandboxSpec, egress: CallEgress | None) -> tuple[list[str], Path]:
        """The bwrap profile, and the directory the workspace's view comes from."""
        source = spec.workspace
        if self._as_root and spec.workspace != _PROBE:
            # bwrap, as the sandbox uid, walks to the workspace through the host's
            # directories (except under /tmp and /var/tmp: fresh tmpfs inside).
            private_tmp = any(t in spec.workspace.parents for t in _PRIVATE_TMP)
            if not private_tmp and not self._identity.reaches(spec.workspace):
                raise SandboxUnavailable(
                    f"the sandbox user (host uid {self._identity.uid}) cannot reach "
                    f"{spec.workspace}: make its parent directories searchable by others "
                    "(chmod o+x), or choose another --sandbox-uid or workspace"
                )
            try:
                source = self._views.view(spec.workspace)
            except IdmapError as exc:
                raise SandboxUnavailable(
                    f"cannot give the sandbox user access to {spec.workspace}: {exc}"
                ) from None
        read_only, pinned = [*spec.read_only, *spec.toolchains], list[Path]()
        if not self._git_writable and spec.workspace != _PROBE:
            pinned, git_read_only = git_protected(spec.workspace)
            read_only += git_read_only
        env = {**spec.base_env, "HOME": str(self._home), "TERM": "dumb", **spec.env}
        lower = source
        if spec.staged is not None:
            source = spec.staged.mountpoint
        return bwrap_args(
            workspace=spec.workspace,
            workspace_source=source,
            cwd=spec.cwd,
            env=env,
            egress_socket=egress.socket_path if egress else None,
            tmp_bytes=spec.limits.tmp_bytes,
            identity=self._identity,
            as_root=self._as_root,
            hidden=[*self._hidden_entries.existing(), *spec.hidden],
            read_only=read_only,
            pinned=pinned,
        ), lower

    def run(
        self,
        spec: SandboxSpec,
        on_output: Callable[[OutputChunk], None],
        cancel: threading.Event,
        on_spawn: Callable[[], None] | None = None,
        call_id: str = "",
    ) -> ProcessOutcome:
        """Run to completion, timeout or cancellation; never raises for the command's faults."""
        fds: list[int] = []
        cgroup: CallCgroup | None = None
        egress: CallEgress | None = None
        start = time.monotonic()
        try:
            if self.enabled and spec.network is not None:
                python = self._python  # before the socket: a missing python3 opens nothing
                egress = self._egress(spec.network)
            if self._cgroups is not None:
                cgroup = self._cgroups.create(
                    call_id or f"{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}",
                    spec.limits.max_processes,
                    spec.limits.memory_bytes,
                )
            status_read = status_write = None
            overlay: list[str] = []
            if self.enabled:
                profile, lower = self._profile(spec, egress)
                overlay = self._overlay(spec, lower)
            prefix = [*self._spawn_prefix(cgroup, overlay), str(self._prlimit)]
            prefix += [*self._prlimit_args(spec.limits), "--"]
            if self.enabled:
                status_read, status_write = os.pipe()
                fds += [status_read, status_write]
                if any("\0" in arg for arg in profile):
                    # One NUL would split an argument in two: an injected bwrap option.
                    raise SandboxUnavailable("a NUL byte in the sandbox profile; nothing ran")
                args_fd = _memfd("bwrap-args", "\0".join(profile) + "\0")
                fds.append(args_fd)
                argv = [*prefix, str(self._bwrap), "--args", str(args_fd)]
                passed = [status_write, args_fd]
                if self._filter is not None:
                    seccomp_fd = _memfd("seccomp", self._filter.program)
                    fds.append(seccomp_fd)
                    argv += ["--seccomp", str(seccomp_fd)]
                    passed.append(seccomp_fd)
                argv += ["--json-status-fd", str(status_write), "--"]
                if egress is not None:
                    argv += relay.command_prefix(python)
                argv += [self._bash, "-c", spec.command]
            else:
                # No sandbox: env(1) sets the request's variables for bash only.
                variables = {"HOME": str(self._home), "TERM": "dumb", **spec.base_env, **spec.env}
                argv = [*prefix, self._env, "-i", *(f"{k}={v}" for k, v in variables.items()),
                        self._bash, "-c", spec.command]  # fmt: skip
                passed = []
            # bwrap hands its stdin to the command: an in-memory file of the request's bytes.
            stdin = _memfd("stdin", spec.stdin) if spec.stdin else subprocess.DEVNULL
            if spec.stdin:
                fds.append(stdin)
            process = subprocess.Popen(
                argv,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=spec.cwd if not self.enabled else "/",
                env=BASE_ENV,
                start_new_session=not self.enabled,
                pass_fds=passed,
            )
        except (OSError, SandboxUnavailable) as exc:
            for fd in fds:
                os.close(fd)
            if cgroup is not None:
                cgroup.remove()
            if egress is not None:
                self._end_egress(egress)
            message = exc.message if isinstance(exc, SandboxUnavailable) else str(exc)
            return ProcessOutcome(
                started=False, exit_code=None, timed_out=False, cancelled=False,
                stdout=CapturedOutput(), stderr=CapturedOutput(),
                sandbox_error=f"could not start the sandbox: {message}",
            )  # fmt: skip
        for fd in fds:
            if fd != status_read:
                os.close(fd)
        if on_spawn:
            on_spawn()

        status = _Status()
        captures = {
            Stream.STDOUT: _Capture(spec.output_cap),
            Stream.STDERR: _Capture(spec.output_cap),
        }

        def kill() -> None:
            # The cgroup holds every process of the call; without one, the namespace's
            # init (its death ends the namespace) and the outer bwrap/group.
            if cgroup is not None:
                cgroup.kill()
            status.kill_init()
            _kill(process, group=not self.enabled)

        try:
            timed_out, cancelled = _pump(
                process, captures, on_output, start + spec.timeout, cancel, kill,
                status_read, status,
            )  # fmt: skip
            exit_code = process.wait()
        finally:
            status.close()
            if cgroup is not None:
                cgroup.remove()  # nothing of the call outlives it
        duration = time.monotonic() - start
        effects = self._end_egress(egress) if egress is not None else ()

        started, inner_exit = True, exit_code
        if status_read is not None:
            started, inner_exit = status.started, status.exit_code(exit_code)
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
            network_effects=effects,
        )

    def _end_egress(self, egress: CallEgress) -> tuple[NetworkEffect, ...]:
        assert self._proxy is not None
        self._proxy.close_call(egress)
        return egress.effects()


def _pump(
    process: subprocess.Popen[bytes],
    captures: dict[Stream, _Capture],
    on_output: Callable[[OutputChunk], None],
    deadline: float,
    cancel: threading.Event,
    kill: Callable[[], None],
    status_fd: int | None,
    status: _Status,
) -> tuple[bool, bool]:
    """Copy output until both pipes close; kill the call on deadline or cancel."""
    selector = selectors.DefaultSelector()
    assert process.stdout is not None and process.stderr is not None
    selector.register(process.stdout, selectors.EVENT_READ, Stream.STDOUT)
    selector.register(process.stderr, selectors.EVENT_READ, Stream.STDERR)
    if status_fd is not None:
        selector.register(status_fd, selectors.EVENT_READ, None)
    timed_out = cancelled = False
    drain_deadline: float | None = None
    try:
        while any(key.data is not None for key in selector.get_map().values()):
            now = time.monotonic()
            if not timed_out and not cancelled:
                if now >= deadline:
                    timed_out = True
                    kill()
                elif cancel.is_set():
                    cancelled = True
                    kill()
            if drain_deadline is None and process.poll() is not None:
                drain_deadline = now + _DRAIN_SECONDS
            if drain_deadline is not None and now >= drain_deadline:
                # The command exited but something still holds the pipes (possible only
                # without the pid namespace): kill what is left and stop reading.
                kill()
                break
            wait = min(max(deadline - now, 0.0), 0.2)
            for key, _ in selector.select(wait):
                data = os.read(key.fd, 65536)
                if key.data is None:
                    status.add(data)
                    if not data:
                        selector.unregister(key.fileobj)
                    continue
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
    if status_fd is not None:
        # Whatever bwrap wrote last; never wait for it (a survivor may hold the pipe).
        os.set_blocking(status_fd, False)
        with os.fdopen(status_fd, "rb") as rest, contextlib.suppress(BlockingIOError):
            status.add(rest.read() or b"")
        status.add(b"\n")
    return timed_out, cancelled


def _kill(process: subprocess.Popen[bytes], group: bool) -> None:
    """SIGKILL the process, or (without bwrap) its process group."""
    with contextlib.suppress(ProcessLookupError):
        if group:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()


class _Status:
    """bwrap's --json-status-fd, read as it arrives: the namespace init's pid, the exit."""

    def __init__(self) -> None:
        self._buffer = b""
        # A pidfd of the namespace's init, opened as soon as bwrap names it: a kill through
        # it can never hit another process that reused the pid after the init was reaped.
        self._init: int | None = None
        self.started = False
        self._exit: int | None = None

    def add(self, data: bytes) -> None:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if "child-pid" in record and self._init is None:
                self.started = True
                with contextlib.suppress(OSError):
                    self._init = os.pidfd_open(int(record["child-pid"]))
            if "exit-code" in record:
                self._exit = int(record["exit-code"])

    def kill_init(self) -> None:
        if self._init is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._init, signal.SIGKILL)

    def close(self) -> None:
        if self._init is not None:
            os.close(self._init)
            self._init = None

    def exit_code(self, bwrap_exit: int) -> int:
        return bwrap_exit if self._exit is None else self._exit


def _memfd(name: str, content: str | bytes) -> int:
    """An in-memory file holding ``content``, positioned at its start (bwrap reads to EOF)."""
    data = content.encode() if isinstance(content, str) else content
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _prlimit_args(limits: Limits, *, per_call_pids: bool) -> list[str]:
    """prlimit's options for ``limits``. RLIMIT_NPROC only without a pids cgroup per call
    (``per_call_pids``): it counts every process of the sandbox's user on the host, so it
    would make concurrent calls (and for a daemon that is not root, the user's own
    programs) count against each call's limit."""
    pairs = (
        ("--cpu", limits.cpu_seconds),
        ("--as", limits.address_space_bytes),
        ("--nproc", 0 if per_call_pids else limits.max_processes),
        ("--fsize", limits.file_size_bytes),
    )
    return [f"{flag}={value}:{value}" for flag, value in pairs if value > 0]
