"""The daemon's one configuration object, built from flags and ``SHELLWARD_*`` variables.

Every flag has an environment twin (``--state-dir`` ↔ ``SHELLWARD_STATE_DIR``); a flag wins
over its variable. ``load_config`` validates once; nothing else reads the environment.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import ipaddress
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shellward._paths import default_socket_path, default_state_dir, default_user_rules
from shellward._version import package_version
from shellwardd.egress.policy import as_network, check_entry, normal_host
from shellwardd.errors import ConfigError
from shellwardd.tomlfile import TomlFile, read_text

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

MAX_COMMAND_BYTES = 64 * KIB


@dataclass(frozen=True)
class Limits:
    """Resource limits applied to every sandboxed process tree (0 = no limit)."""

    cpu_seconds: int = 3600
    address_space_bytes: int = 16 * GIB
    max_processes: int = 4096
    file_size_bytes: int = 8 * GIB
    # The call's cgroup memory.max (where the memory controller is available).
    memory_bytes: int = 16 * GIB
    # Size of each of the sandbox's /tmp and /var/tmp (tmpfs, counted in RAM).
    tmp_bytes: int = 1 * GIB


def merge_limits(operator: Limits, requested: Limits | None) -> Limits:
    """The limits a call runs under: a request may only lower the operator's.

    In ``requested`` a 0 means "not asked for" (the wire's default), so asking for one
    limit keeps every other one at the operator's value; a value above the operator's,
    or any value where the operator set none (0), is capped at the operator's.
    """
    if requested is None:
        return operator
    merged = {}
    for name in Limits.__dataclass_fields__:
        mine, asked = getattr(operator, name), getattr(requested, name)
        if asked <= 0:
            merged[name] = mine
        else:
            merged[name] = asked if mine <= 0 else min(asked, mine)
    return Limits(**merged)


# Hidden from every command (relative to the daemon user's home; globs allowed): the
# credential stores of developer tools and cloud CLIs.
DEFAULT_HIDDEN = (
    ".ssh", ".gnupg", ".netrc", ".git-credentials", ".config/git/credentials",
    ".aws", ".azure", ".config/gcloud", ".oci", ".config/doctl", ".config/linode-cli",
    ".config/hcloud", ".config/scw", ".config/exoscale", ".ibmcloud", ".aliyun",
    ".docker", ".kube", ".minikube", ".config/helm", ".terraform.d", ".terraformrc",
    ".config/gh", ".config/hub", ".config/glab-cli", ".config/op", ".password-store",
    ".npmrc", ".yarnrc", ".yarnrc.yml", ".pypirc", ".config/pip", ".cargo/credentials",
    ".cargo/credentials.toml", ".gem/credentials", ".m2/settings.xml", ".gradle/gradle.properties",
    ".nuget/NuGet/NuGet.Config", ".composer/auth.json", ".config/composer/auth.json",
    ".vault-token", ".config/heroku", ".netlify", ".config/netlify", ".vercel",
    ".config/vercel", ".fly", ".config/flyctl", ".wrangler", ".config/.wrangler",
    ".claude", ".claude.json", ".codex", ".config/github-copilot", ".gemini",
    ".config/openai", ".config/anthropic", ".huggingface", ".cache/huggingface/token",
    ".config/*token*", ".config/*secret*", ".config/*credential*", ".local/share/keyrings",
    ".mozilla", ".config/google-chrome", ".config/chromium",
)  # fmt: skip


@dataclass(frozen=True)
class Config:
    socket: Path
    state_dir: Path
    workspaces: tuple[Path, ...]
    tcp: str | None = None
    token: str | None = None
    no_sandbox: bool = False
    default_timeout: float = 600.0
    max_timeout: float = 24 * 3600.0
    output_cap_bytes: int = 1 * MIB
    read_max_bytes: int = 16 * MIB
    grace_period: float = 10.0
    limits: Limits = field(default_factory=Limits)
    user_rules: Path | None = None
    trusted_repos: tuple[Path, ...] = ()
    ignore_globs: tuple[str, ...] = ()
    tools_config: Path | None = None
    # Operator-trusted program directories, first on the sandbox's PATH and read-only in it.
    toolchains: tuple[Path, ...] = ()
    # Off: only --toolchain directories join the sandbox's PATH (no workspace venvs,
    # node_modules/.bin, pyenv, nvm, cargo, go or ~/.local/bin found automatically).
    no_auto_toolchains: bool = False
    user: str = ""
    retention_seconds: float = 7 * 24 * 3600.0
    # Most bytes of before-images kept for undo (the oldest calls' go first past it).
    undo_max_bytes: int = 1 * GIB
    approval_timeout: float = 3600.0
    log_level: str = "info"
    # Secret paths hidden from commands (relative to the home or absolute; globs allowed).
    hidden: tuple[str, ...] = DEFAULT_HIDDEN
    # Let commands write .git/hooks and .git/config (read-only by default).
    git_writable: bool = False
    # The unprivileged host uid/gid a root daemon runs its sandboxes as.
    sandbox_uid: int = 65534
    # How staged writes are mounted: "auto" (kernel overlayfs if it works here, else
    # fuse-overlayfs), "kernel" or "fuse".
    overlay: str = "auto"
    # The ledger's URL (sqlite:///path or postgresql://…); "" is the state dir's SQLite file.
    ledger: str = ""
    # This daemon's name in a fleet: the calls it records are the ones it holds the
    # workspace of; "" is the host name and a digest of the state directory.
    daemon_id: str = ""
    lease_seconds: float = 30.0
    # Long RPCs (a running command, a wait, a tool call) served at once; each holds a thread.
    max_running_calls: int = 512
    # HOST:PORT of the Prometheus endpoint; None: no metrics (and no cost).
    metrics: str | None = None
    metrics_allow_remote: bool = False
    # auto: text lines on a terminal, JSON lines otherwise.
    log_format: str = "auto"
    # The operator's network allow-list entries (domains, addresses, networks), its denials,
    # and names pinned to an address (resolved by the proxy before DNS).
    allow_domains: tuple[str, ...] = ()
    deny_domains: tuple[str, ...] = ()
    pinned_hosts: tuple[tuple[str, str], ...] = ()

    @property
    def ledger_path(self) -> Path:
        return self.state_dir / "ledger.sqlite3"

    @property
    def ledger_url(self) -> str:
        return self.ledger or f"sqlite://{self.ledger_path}"

    @property
    def identity(self) -> str:
        if self.daemon_id:
            return self.daemon_id
        digest = hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:8]
        return f"{socket.gethostname()}-{digest}"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "daemon.log"


@dataclass(frozen=True)
class _Option:
    flag: str
    env: str
    help: str
    kind: type = str
    repeatable: bool = False
    switch: bool = False


_OPTIONS = (
    _Option(
        "--socket",
        "SHELLWARD_SOCKET",
        f"Unix socket to listen on (default: {default_socket_path()}).",
    ),
    _Option(
        "--state-dir",
        "SHELLWARD_STATE_DIR",
        f"Where the ledger and logs live (default: {default_state_dir()}).",
    ),
    _Option(
        "--workspace",
        "SHELLWARD_WORKSPACE",
        "A root commands may run in; repeatable (the variable takes a ':'-separated list). "
        "Default: the current directory.",
        repeatable=True,
    ),
    _Option(
        "--tcp",
        "SHELLWARD_TCP",
        "Also listen on HOST:PORT over TCP; requires --token. Off by default.",
    ),
    _Option(
        "--token",
        "SHELLWARD_TOKEN",
        "Bearer token TCP clients must send in 'authorization' metadata.",
    ),
    _Option(
        "--no-sandbox",
        "SHELLWARD_NO_SANDBOX",
        "Run commands WITHOUT bubblewrap: no isolation at all. Only for machines without bwrap.",
        switch=True,
    ),
    _Option(
        "--default-timeout",
        "SHELLWARD_DEFAULT_TIMEOUT",
        "Seconds a command may run when the request names no timeout (default 600).",
        kind=float,
    ),
    _Option(
        "--max-timeout",
        "SHELLWARD_MAX_TIMEOUT",
        "Largest timeout a request may ask for, in seconds (default 86400).",
        kind=float,
    ),
    _Option(
        "--output-cap",
        "SHELLWARD_OUTPUT_CAP",
        "Bytes of stdout and of stderr kept per call; the rest is counted (default 1048576).",
        kind=int,
    ),
    _Option(
        "--read-max-bytes",
        "SHELLWARD_READ_MAX_BYTES",
        "Most bytes read_file may read in one call (its max_bytes); a request above it is "
        "refused (default 16777216). What the ledger keeps is capped by --output-cap.",
        kind=int,
    ),
    _Option(
        "--grace-period",
        "SHELLWARD_GRACE_PERIOD",
        "Seconds running calls get to finish at shutdown before they are killed (default 10).",
        kind=float,
    ),
    _Option(
        "--limit-cpu",
        "SHELLWARD_LIMIT_CPU",
        "CPU seconds per process (RLIMIT_CPU; 0 = none; default 3600).",
        kind=int,
    ),
    _Option(
        "--limit-memory",
        "SHELLWARD_LIMIT_MEMORY",
        "Address space bytes per process (RLIMIT_AS; 0 = none; default 16 GiB).",
        kind=int,
    ),
    _Option(
        "--limit-processes",
        "SHELLWARD_LIMIT_PROCESSES",
        "Processes per call (the call's pids cgroup; where the daemon can make none, "
        "RLIMIT_NPROC, which counts every process of the sandbox's user; 0 = none; "
        "default 4096).",
        kind=int,
    ),
    _Option(
        "--limit-cgroup-memory",
        "SHELLWARD_LIMIT_CGROUP_MEMORY",
        "Memory of a call's whole process tree, in bytes (cgroup memory.max where the memory "
        "controller is available; 0 = none; default 16 GiB).",
        kind=int,
    ),
    _Option(
        "--limit-tmp",
        "SHELLWARD_LIMIT_TMP",
        "Size of the sandbox's /tmp and of its /var/tmp, each, in bytes (tmpfs, held in RAM; "
        "default 1 GiB; 0 is not allowed: an unbounded tmpfs can fill the host's memory).",
        kind=int,
    ),
    _Option(
        "--limit-file-size",
        "SHELLWARD_LIMIT_FILE_SIZE",
        "Largest file a command may write, in bytes (RLIMIT_FSIZE; 0 = none; default 8 GiB).",
        kind=int,
    ),
    _Option(
        "--user-rules",
        "SHELLWARD_USER_RULES",
        f"The user's rule file (default: {default_user_rules()}, if it exists).",
    ),
    _Option(
        "--trusted-repo",
        "SHELLWARD_TRUSTED_REPO",
        "A repository whose .shellward/rules.toml may loosen verdicts; repeatable.",
        repeatable=True,
    ),
    _Option(
        "--ignore",
        "SHELLWARD_IGNORE",
        "A glob of workspace paths the write detector neither indexes nor reports "
        "(e.g. node_modules, '*.pyc'); repeatable (the variable takes a ':'-separated list).",
        repeatable=True,
    ),
    _Option(
        "--toolchain",
        "SHELLWARD_TOOLCHAIN",
        "A directory of programs you trust (a virtualenv's bin, node_modules/.bin, "
        "~/.cargo/bin): put first on the sandbox's PATH, in the order given, and read-only "
        "inside it; repeatable (the variable takes a ':'-separated list).",
        repeatable=True,
    ),
    _Option(
        "--no-auto-toolchains",
        "SHELLWARD_NO_AUTO_TOOLCHAINS",
        "Do not add the workspace's .venv/bin, venv/bin, node_modules/.bin and your pyenv, "
        "nvm, cargo, go and ~/.local/bin directories to the sandbox's PATH; only "
        "--toolchain directories.",
        switch=True,
    ),
    _Option(
        "--tools-config",
        "SHELLWARD_TOOLS_CONFIG",
        "TOML file of MCP servers and tool pins (see docs/mcp.md). Default: none.",
    ),
    _Option(
        "--user",
        "SHELLWARD_USER",
        "The user the daemon acts for, part of business idempotency keys (default: the "
        "login name).",
    ),
    _Option(
        "--retention",
        "SHELLWARD_RETENTION",
        "Seconds a recorded call answers retries of its step (default 604800, 7 days); older "
        "records answer RECORD_EXPIRED instead of running again.",
        kind=float,
    ),
    _Option(
        "--undo-max-bytes",
        "SHELLWARD_UNDO_MAX_BYTES",
        "Most bytes of file before-images kept for `shellward undo` (default 1073741824, "
        "1 GiB); past it the oldest calls' images are evicted first, as are those of calls "
        "older than --retention. An undo that needs an evicted image answers RECORD_EXPIRED.",
        kind=int,
    ),
    _Option(
        "--approval-timeout",
        "SHELLWARD_APPROVAL_TIMEOUT",
        "Seconds a call waits for a human's approval before it is denied (default 3600).",
        kind=float,
    ),
    _Option(
        "--hide",
        "SHELLWARD_HIDE",
        "Also hide this path from commands (relative to the daemon user's home, or absolute; "
        "globs allowed); repeatable (the variable takes a ':'-separated list). A broad default "
        "set of credential stores is always hidden (see docs/security.md).",
        repeatable=True,
    ),
    _Option(
        "--unhide",
        "SHELLWARD_UNHIDE",
        "Remove an entry of the default hidden set (as written there, e.g. .docker); "
        "repeatable (the variable takes a ':'-separated list).",
        repeatable=True,
    ),
    _Option(
        "--git-writable",
        "SHELLWARD_GIT_WRITABLE",
        "Let commands write .git/hooks and .git/config (read-only by default: a hook or "
        "core.fsmonitor written there runs later, outside the sandbox).",
        switch=True,
    ),
    _Option(
        "--overlay",
        "SHELLWARD_OVERLAY",
        "auto, kernel or fuse: what mounts the overlay that stages each command's writes "
        "(auto, the default: kernel overlayfs if it works here, else fuse-overlayfs).",
    ),
    _Option(
        "--sandbox-uid",
        "SHELLWARD_SANDBOX_UID",
        "When the daemon runs as root: the unprivileged host uid (and gid) commands run as "
        "(default 65534, nobody); workspaces appear to it as its own through idmapped mounts.",
        kind=int,
    ),
    _Option(
        "--ledger",
        "SHELLWARD_LEDGER",
        "Where the ledger lives: sqlite:///absolute/path, or postgresql://user@host/db to share "
        "one ledger among a fleet of daemons (docs/fleet.md). Default: ledger.sqlite3 in the "
        "state directory.",
    ),
    _Option(
        "--daemon-id",
        "SHELLWARD_DAEMON_ID",
        "This daemon's name in a fleet, unique among the daemons of one ledger (default: the "
        "host name and a digest of the state directory).",
    ),
    _Option(
        "--lease-seconds",
        "SHELLWARD_LEASE_SECONDS",
        "How long this daemon's lease on the ledger lasts without renewal (renewed when a "
        "third of it has passed); once another daemon finds it lapsed, this daemon's running "
        "calls become uncertain for the fleet (default 30).",
        kind=float,
    ),
    _Option(
        "--max-running-calls",
        "SHELLWARD_MAX_RUNNING_CALLS",
        "Long RPCs (RunCommand, Replay, WaitCall, CallTool, CancelCall) served at once; one "
        "more is refused with UNAVAILABLE and health says NOT_SERVING while full. Each holds a "
        "thread waiting on its command (default 512).",
        kind=int,
    ),
    _Option(
        "--metrics",
        "SHELLWARD_METRICS",
        "Serve Prometheus metrics over HTTP on HOST:PORT (e.g. 127.0.0.1:9464). Off by default; "
        "a non-loopback host needs --metrics-allow-remote.",
    ),
    _Option(
        "--metrics-allow-remote",
        "SHELLWARD_METRICS_ALLOW_REMOTE",
        "Let --metrics listen on a non-loopback address (the endpoint has no authentication).",
        switch=True,
    ),
    _Option(
        "--allow-domain",
        "SHELLWARD_ALLOW_DOMAIN",
        "A destination every call granted network may reach through the daemon's proxy: a "
        "domain (example.com, or *.example.com for its subdomains), an address or a network "
        "(10.0.0.0/8). Loopback, link-local and private addresses are reachable only when "
        "named here. Repeatable (the variable takes a ':'-separated list; see docs/network.md).",
        repeatable=True,
    ),
    _Option(
        "--deny-domain",
        "SHELLWARD_DENY_DOMAIN",
        "A destination no call may reach, even one a rule names (same forms as "
        "--allow-domain); repeatable.",
        repeatable=True,
    ),
    _Option(
        "--resolve",
        "SHELLWARD_RESOLVE",
        "NAME=ADDRESS: the proxy resolves NAME to ADDRESS instead of asking DNS (the address "
        "is checked like any other); repeatable.",
        repeatable=True,
    ),
    _Option(
        "--network-config",
        "SHELLWARD_NETWORK_CONFIG",
        "TOML file with the network allow-list: allow_domains = [...], deny_domains = [...], "
        "resolve = {NAME = ADDRESS}; added to the flags (docs/network.md).",
    ),
    _Option("--log-level", "SHELLWARD_LOG_LEVEL", "debug, info, warning or error (default info)."),
    _Option(
        "--log-format",
        "SHELLWARD_LOG_FORMAT",
        "auto, text or json: the format of the log on stderr (auto: text on a terminal, JSON "
        "lines otherwise; the log file in the state directory is always JSON lines).",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shellwardd",
        description="The shellward daemon: runs agents' shell commands in a bubblewrap sandbox "
        "and records every call in a durable ledger. Each flag has a SHELLWARD_* twin.",
    )
    parser.add_argument("--version", action="version", version=f"shellwardd {package_version()}")
    for option in _OPTIONS:
        help_text = f"{option.help} [env: {option.env}]"
        dest = option.flag.lstrip("-").replace("-", "_")
        if option.switch:
            parser.add_argument(
                option.flag, dest=dest, action="store_true", default=None, help=help_text
            )
        elif option.repeatable:
            parser.add_argument(option.flag, dest=dest, action="append", help=help_text)
        else:
            parser.add_argument(option.flag, dest=dest, type=option.kind, help=help_text)
    return parser


def _from_env(option: _Option, env: Mapping[str, str]) -> object:
    raw = env.get(option.env)
    if raw is None or raw == "":
        return None
    if option.switch:
        return raw.lower() in ("1", "true", "yes", "on")
    if option.repeatable:
        return [part for part in raw.split(":") if part]
    try:
        return option.kind(raw)
    except ValueError:
        raise ConfigError(
            f"{option.env}={raw!r} is not a valid {option.kind.__name__}; fix or unset it"
        ) from None


def load_config(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Parse flags, fall back to environment twins, then to defaults; validate."""
    env = os.environ if env is None else env
    args = vars(build_parser().parse_args(argv))
    values: dict[str, object] = {}
    for option in _OPTIONS:
        dest = option.flag.lstrip("-").replace("-", "_")
        value = args.get(dest)
        values[dest] = value if value is not None else _from_env(option, env)
    return _validate(values)


def _positive(values: dict[str, object], key: str, default: float) -> float:
    value = values.get(key)
    if value is None:
        return default
    number = float(value)  # type: ignore[arg-type]
    if number <= 0:
        raise ConfigError(f"--{key.replace('_', '-')} must be positive, got {value}")
    return number


def _limit(values: dict[str, object], key: str, default: int) -> int:
    value = values.get(key)
    if value is None:
        return default
    if int(value) < 0:  # type: ignore[call-overload]
        raise ConfigError(
            f"--{key.replace('_', '-')} must be 0 (no limit) or positive, got {value}"
        )
    return int(value)  # type: ignore[call-overload]


def _strings(value: object) -> list[str]:
    """A repeatable option's values (a list from flags or the environment, or nothing)."""
    return [str(item) for item in value] if isinstance(value, list) else []


def _existing_file(value: object, flag: str) -> Path | None:
    if not value:
        return None
    path = Path(str(value)).expanduser()
    if not path.is_file():
        raise ConfigError(f"{flag} {value!r} is not a file; create it or drop the flag")
    return path.absolute()


def _toolchain(raw: str) -> Path:
    path = Path(raw).expanduser()
    if not path.is_absolute() or not path.is_dir():
        raise ConfigError(
            f"--toolchain {raw!r} is not an absolute path to a directory; give the directory "
            "holding the programs (e.g. /home/me/app/.venv/bin)"
        )
    # ':' would split the sandbox's PATH into other directories than the one trusted.
    if ":" in str(path):
        raise ConfigError(f"--toolchain {raw!r} contains ':', which PATH cannot hold")
    return path.absolute()


def _validate(values: dict[str, object]) -> Config:
    workspaces = []
    for raw in _strings(values.get("workspace")) or [os.getcwd()]:
        path = Path(raw).expanduser()
        if not path.is_dir():
            raise ConfigError(
                f"workspace {raw!r} is not a directory; create it or pass another --workspace"
            )
        workspaces.append(path.resolve())

    tcp = values.get("tcp")
    token = values.get("token")
    if tcp and not token:
        raise ConfigError(
            "--tcp needs --token (or SHELLWARD_TOKEN): TCP is never served unauthenticated"
        )
    if tcp:
        host, _, port = str(tcp).rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--tcp {tcp!r} is not HOST:PORT (e.g. 127.0.0.1:7433)")

    log_level = _choice(values, "log_level", ("info", "debug", "warning", "error"))

    default_timeout = _positive(values, "default_timeout", 600.0)
    max_timeout = _positive(values, "max_timeout", 24 * 3600.0)
    if default_timeout > max_timeout:
        raise ConfigError("--default-timeout is larger than --max-timeout")

    user_rules = values.get("user_rules")
    if user_rules is None and default_user_rules().is_file():
        user_rules = default_user_rules()

    defaults = Limits()
    return Config(
        socket=Path(str(values.get("socket") or default_socket_path())).expanduser().absolute(),
        state_dir=Path(str(values.get("state_dir") or default_state_dir())).expanduser().absolute(),
        workspaces=tuple(workspaces),
        tcp=str(tcp) if tcp else None,
        token=str(token) if token else None,
        no_sandbox=bool(values.get("no_sandbox")),
        default_timeout=default_timeout,
        max_timeout=max_timeout,
        output_cap_bytes=int(_positive(values, "output_cap", float(MIB))),
        read_max_bytes=int(_positive(values, "read_max_bytes", float(16 * MIB))),
        grace_period=_positive(values, "grace_period", 10.0),
        limits=Limits(
            cpu_seconds=_limit(values, "limit_cpu", defaults.cpu_seconds),
            address_space_bytes=_limit(values, "limit_memory", defaults.address_space_bytes),
            max_processes=_limit(values, "limit_processes", defaults.max_processes),
            file_size_bytes=_limit(values, "limit_file_size", defaults.file_size_bytes),
            memory_bytes=_limit(values, "limit_cgroup_memory", defaults.memory_bytes),
            tmp_bytes=int(_positive(values, "limit_tmp", float(defaults.tmp_bytes))),
        ),
        user_rules=Path(str(user_rules)).expanduser() if user_rules else None,
        trusted_repos=tuple(
            Path(p).expanduser().resolve() for p in _strings(values.get("trusted_repo"))
        ),
        ignore_globs=tuple(_strings(values.get("ignore"))),
        tools_config=_existing_file(values.get("tools_config"), "--tools-config"),
        toolchains=tuple(_toolchain(raw) for raw in _strings(values.get("toolchain"))),
        no_auto_toolchains=bool(values.get("no_auto_toolchains")),
        user=str(values.get("user") or getpass.getuser()),
        retention_seconds=_positive(values, "retention", 7 * 24 * 3600.0),
        undo_max_bytes=int(_positive(values, "undo_max_bytes", float(GIB))),
        approval_timeout=_positive(values, "approval_timeout", 3600.0),
        log_level=log_level,
        hidden=_hidden(values),
        git_writable=bool(values.get("git_writable")),
        sandbox_uid=_sandbox_uid(values),
        overlay=_choice(values, "overlay", ("auto", "kernel", "fuse")),
        ledger=str(values.get("ledger") or ""),  # its scheme is checked when it opens
        daemon_id=str(values.get("daemon_id") or ""),
        lease_seconds=_positive(values, "lease_seconds", 30.0),
        max_running_calls=int(_positive(values, "max_running_calls", 512)),
        metrics=_metrics_address(values),
        metrics_allow_remote=bool(values.get("metrics_allow_remote")),
        log_format=_choice(values, "log_format", ("auto", "text", "json")),
        **_network(values),
    )


def _choice(values: dict[str, object], key: str, choices: tuple[str, ...]) -> str:
    value = str(values.get(key) or choices[0]).lower()
    if value not in choices:
        raise ConfigError(
            f"--{key.replace('_', '-')} {value!r}: use {', '.join(choices[:-1])} or {choices[-1]}"
        )
    return value


def _metrics_address(values: dict[str, object]) -> str | None:
    """The metrics endpoint's HOST:PORT; a non-loopback host only when allowed: the endpoint
    has no authentication, and its numbers tell an observer how busy the daemon is."""
    raw = values.get("metrics")
    if not raw:
        return None
    host, _, port = str(raw).rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--metrics {raw!r} is not HOST:PORT (e.g. 127.0.0.1:9464)")
    if not values.get("metrics_allow_remote") and not _is_loopback(host):
        raise ConfigError(
            f"--metrics {raw!r} listens beyond this host and the endpoint has no "
            "authentication; use 127.0.0.1:PORT, or add --metrics-allow-remote if a firewall "
            "or a scraper on a private network guards it"
        )
    return str(raw)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name that might resolve anywhere


def _network(values: dict[str, object]) -> dict[str, tuple[Any, ...]]:
    """The allow-list entries of the flags and of the --network-config file, together."""
    allow, deny = _strings(values.get("allow_domain")), _strings(values.get("deny_domain"))
    resolve = _strings(values.get("resolve"))
    path = _existing_file(values.get("network_config"), "--network-config")
    if path is not None:
        text = read_text(path, _file_error, "network config")
        document = TomlFile(str(path), text, _file_error)
        document.check_top_level(
            _NETWORK_KEYS, "use allow_domains, deny_domains and resolve (docs/network.md)"
        )
        for key, into in (("allow_domains", allow), ("deny_domains", deny)):
            entries = document.data.get(key, [])
            if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
                document.fail(document.top_key_line(key), f"`{key}` must be a list of strings")
            into.extend(entries)
        pins = document.data.get("resolve", {})
        if not isinstance(pins, dict) or not all(isinstance(v, str) for v in pins.values()):
            document.fail(document.top_key_line("resolve"), "`resolve` maps names to addresses")
        resolve.extend(f"{name}={address}" for name, address in pins.items())
    return {
        "allow_domains": _destinations(allow, "allow-domain"),
        "deny_domains": _destinations(deny, "deny-domain"),
        "pinned_hosts": tuple(_pinned(raw) for raw in resolve),
    }


_NETWORK_KEYS = ("allow_domains", "deny_domains", "resolve")


def _file_error(path: str, line: int, message: str) -> ConfigError:
    return ConfigError(f"{path}:{line}: {message}")


def _destinations(entries: list[str], flag: str) -> tuple[str, ...]:
    found = []
    for raw in entries:
        try:
            found.append(check_entry(raw))
        except ValueError as exc:
            raise ConfigError(f"--{flag}: {exc}") from None
    return tuple(dict.fromkeys(found))


def _pinned(raw: str) -> tuple[str, str]:
    name, _, address = raw.partition("=")
    if as_network(address) is None or "/" in address or as_network(name) is not None:
        raise ConfigError(f"--resolve {raw!r} is not NAME=ADDRESS (e.g. api.test=192.0.2.7)")
    try:
        check_entry(name)
    except ValueError as exc:
        raise ConfigError(f"--resolve {raw!r}: {exc}") from None
    return normal_host(name), normal_host(address)


def _hidden(values: dict[str, object]) -> tuple[str, ...]:
    unhide = _strings(values.get("unhide"))
    unknown = [entry for entry in unhide if entry not in DEFAULT_HIDDEN]
    if unknown:
        raise ConfigError(
            f"--unhide {unknown[0]!r} is not in the default hidden set; "
            "see docs/security.md for its entries"
        )
    kept = [entry for entry in DEFAULT_HIDDEN if entry not in unhide]
    return tuple(kept + [e for e in _strings(values.get("hide")) if e not in kept])


def _sandbox_uid(values: dict[str, object]) -> int:
    raw = values.get("sandbox_uid")
    uid = 65534 if raw is None else int(raw)  # type: ignore[call-overload]
    if uid <= 0:
        raise ConfigError(f"--sandbox-uid must be an unprivileged uid (not root), got {uid}")
    return uid
