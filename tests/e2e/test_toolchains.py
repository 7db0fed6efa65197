"""``--toolchain DIR``: the operator's program directories on the sandbox's PATH, read-only.

A venv with pytest is the toolchain: with it, `pytest` and `python -m pytest` resolve in the
sandbox as in the user's terminal; a command cannot replace a program in a toolchain
directory, even one inside the workspace. The venv is made for the test from the system's
python3, in a directory a root daemon's unprivileged sandbox user can reach (the venv running
these tests may live under /root, which that user cannot enter).
"""

from __future__ import annotations

import importlib.util
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward import Client
from shellward.types import Code, ReplayPolicy
from shellwardd.classifier.toolchains import build_toolchains
from shellwardd.config import ConfigError, load_config
from shellwardd.sandbox.profile import BASE_PATH
from tests.helpers import Daemon, start_daemon

SYSTEM_PYTHON = Path("/usr/bin/python3")
# pytest and what it imports, copied from the venv running the tests.
PYTEST_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py")
SCRIPT = "#!/bin/sh\necho toolchain-tool\n"


def _make_venv(venv: Path) -> Path:
    """A venv of the system's python3 with pytest in it; its bin directory."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip("needs the system's /usr/bin/python3 to build a toolchain venv")
    subprocess.run(
        [str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(venv)],
        check=True, capture_output=True,
    )  # fmt: skip
    (site,) = (venv / "lib").glob("python3*/site-packages")
    for name in PYTEST_PACKAGES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, site / name)
        else:
            shutil.copy(origin, site / origin.name)
    script = venv / "bin" / "pytest"
    script.write_text(
        f"#!{venv}/bin/python\nimport sys\nfrom pytest import console_main\n"
        "sys.exit(console_main())\n"
    )
    script.chmod(0o755)
    return venv / "bin"


@pytest.fixture(scope="module")
def venv_bin(module_host_dir: Path) -> Path:
    return _make_venv(module_host_dir / "venv")


@pytest.fixture(scope="module")
def toolchain_daemon(tmp_path_factory: pytest.TempPathFactory, venv_bin: Path) -> Iterator[Daemon]:
    """One daemon for the module's tests of it: each attack must leave the toolchain as it
    was, and checks that it did."""
    tmp_path = tmp_path_factory.mktemp("toolchain")
    workspace = tmp_path / "workspace"
    inside = workspace / ".venv" / "bin"
    inside.mkdir(parents=True)
    tool = inside / "ws-tool"
    tool.write_text(SCRIPT)
    tool.chmod(0o755)
    handle = start_daemon(
        tmp_path / "run" / "shellward.sock", tmp_path / "state", workspace,
        "--toolchain", str(inside), "--toolchain", str(venv_bin),
    )  # fmt: skip
    yield handle
    handle.stop(signal.SIGKILL if handle.process.poll() is None else signal.SIGTERM)


def _run(daemon: Daemon, command: str) -> tuple[Code, int | None, str]:
    with Client(daemon.socket) as client:
        result = client.run_command(command, cwd=daemon.workspace, timeout=120)
    return result.code, result.exit_code, result.stdout.text + result.stderr.text


def test_pytest_and_python_resolve_from_the_toolchain(toolchain_daemon: Daemon) -> None:
    code, exit_code, output = _run(toolchain_daemon, "pytest --version")
    assert (code, exit_code) == (Code.OK, 0) and "pytest" in output, output
    code, exit_code, output = _run(toolchain_daemon, "python -m pytest --version")
    assert (code, exit_code) == (Code.OK, 0) and "pytest" in output, output
    code, _, output = _run(toolchain_daemon, "ws-tool")
    assert code is Code.OK and "toolchain-tool" in output


@pytest.mark.parametrize(
    "attack",
    [
        "echo 'echo hijacked' > .venv/bin/ws-tool",
        "rm -f .venv/bin/ws-tool",
        "mv .venv/bin/ws-tool .venv/bin/old",
        "echo 'echo hijacked' > .venv/bin/pytest && chmod +x .venv/bin/pytest",
    ],
)
def test_a_command_cannot_replace_a_toolchain_program(
    toolchain_daemon: Daemon, attack: str
) -> None:
    code, _, output = _run(toolchain_daemon, attack)
    assert code is not Code.OK, output
    tool = toolchain_daemon.workspace / ".venv" / "bin" / "ws-tool"
    assert tool.read_text() == SCRIPT
    assert not (toolchain_daemon.workspace / ".venv" / "bin" / "pytest").exists()
    assert "toolchain-tool" in _run(toolchain_daemon, "ws-tool")[2]


@pytest.mark.parametrize("raw", ["relative/bin", "/no/such/dir", "/tmp/a:b"])
def test_a_toolchain_must_be_an_absolute_directory(raw: str, tmp_path: Path) -> None:
    if raw == "/tmp/a:b":
        Path(raw).mkdir(exist_ok=True)
    with pytest.raises(ConfigError, match="--toolchain"):
        load_config(["--workspace", str(tmp_path), "--toolchain", raw], env={})


def test_toolchains_from_the_environment_keep_their_order(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    config = load_config(
        ["--workspace", str(tmp_path)], env={"SHELLWARD_TOOLCHAIN": f"{second}:{first}"}
    )
    assert config.toolchains == (second, first)


def test_a_program_the_file_tools_plant_in_a_workspace_toolchain_is_never_trusted(
    toolchain_daemon: Daemon,
) -> None:
    workspace = toolchain_daemon.workspace
    (workspace / "notes.txt").write_text("notes\n")
    with Client(toolchain_daemon.socket) as client:
        assert client.classify("cat notes.txt", cwd=workspace).replay_policy is ReplayPolicy.AUTO
        planted = client.call_tool(
            "write_file",
            {"path": ".venv/bin/cat", "content": "#!/bin/sh\necho planted > planted.txt\n"},
            cwd=workspace,
        )
        assert planted.ok, planted.content
        (workspace / ".venv" / "bin" / "cat").chmod(0o755)
        verdict = client.classify("cat notes.txt", cwd=workspace)
        # A toolchain outside the workspaces is the operator's word: its pytest keeps its rule.
        trusted = client.classify("pytest --version", cwd=workspace)
    assert verdict.replay_policy is ReplayPolicy.NEVER
    assert "toolchain inside a workspace" in verdict.reason
    assert trusted.replay_policy is ReplayPolicy.ASK, trusted.reason


def test_toolchains_are_marked_by_whether_a_workspace_holds_them(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".venv" / "bin").mkdir(parents=True)
    outside = tmp_path / "outside" / "bin"
    outside.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(workspace)
    marked = build_toolchains(
        [workspace / ".venv" / "bin", outside, link / ".venv" / "bin"],
        [workspace],
        auto=False,
        home=tmp_path,
        reaches=lambda path: True,
    )
    assert [t.agent_writable for t in marked.operator] == [True, False, True]


def test_a_program_called_by_its_path_in_a_trusted_toolchain_keeps_its_rule(
    toolchain_daemon: Daemon, venv_bin: Path
) -> None:
    workspace = toolchain_daemon.workspace
    with Client(toolchain_daemon.socket) as client:
        by_path = client.classify(f"{venv_bin}/pytest --version", cwd=workspace)
        in_workspace = client.classify(".venv/bin/ws-tool", cwd=workspace)
        elsewhere = client.classify("/opt/not-a-toolchain/pytest --version", cwd=workspace)
    assert by_path.replay_policy is ReplayPolicy.ASK, by_path.reason
    assert in_workspace.replay_policy is ReplayPolicy.NEVER
    assert elsewhere.replay_policy is ReplayPolicy.NEVER


@pytest.fixture(scope="module")
def found_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon given no --toolchain: the workspace's .venv (with pytest) and node_modules
    (a package with a `bin`, made here: no network) are found on their own. One for the
    module: its tests only run commands (the one that writes must be refused)."""
    tmp_path = tmp_path_factory.mktemp("found")
    workspace = tmp_path / "workspace"
    _make_venv(workspace / ".venv")
    package = workspace / "node_modules" / "hello-bin"
    package.mkdir(parents=True)
    (package / "package.json").write_text(
        '{"name": "hello-bin", "version": "1.0.0", "bin": {"hello-bin": "cli.js"}}\n'
    )
    cli = package / "cli.js"
    cli.write_text("#!/usr/bin/env node\nconsole.log('hello from node_modules');\n")
    cli.chmod(0o755)
    (workspace / "node_modules" / ".bin").mkdir()
    (workspace / "node_modules" / ".bin" / "hello-bin").symlink_to("../hello-bin/cli.js")
    (workspace / "package.json").write_text('{"name": "ws", "version": "1.0.0"}\n')
    handle = start_daemon(tmp_path / "run" / "shellward.sock", tmp_path / "state", workspace)
    yield handle
    handle.stop(signal.SIGKILL if handle.process.poll() is None else signal.SIGTERM)


def test_the_workspace_venv_is_found_without_a_toolchain_flag(found_daemon: Daemon) -> None:
    code, exit_code, output = _run(found_daemon, "pytest --version")
    assert (code, exit_code) == (Code.OK, 0) and "pytest" in output, output
    code, exit_code, output = _run(found_daemon, "python -m pytest --version")
    assert (code, exit_code) == (Code.OK, 0) and "pytest" in output, output
    with Client(found_daemon.socket) as client:
        verdict = client.classify("pytest --version", cwd=found_daemon.workspace)
        (status,) = client.status().workspace_status
    # Found, not vouched for: it runs, but its rule does not apply.
    assert verdict.replay_policy is ReplayPolicy.NEVER and "--toolchain" in verdict.reason
    venv, node = found_daemon.workspace / ".venv" / "bin", found_daemon.workspace / "node_modules"
    assert status.path.startswith(f"{venv}:{node / '.bin'}:"), status.path
    assert status.path.endswith(BASE_PATH)


def test_npx_runs_a_package_from_the_workspace_node_modules(found_daemon: Daemon) -> None:
    if shutil.which("npx") is None:
        pytest.skip("node/npx not installed")
    code, exit_code, output = _run(found_daemon, "npx --no-install hello-bin")
    assert (code, exit_code) == (Code.OK, 0), output
    assert "hello from node_modules" in output
    # By its bare name too: node_modules/.bin is on PATH, as in an npm script.
    code, exit_code, output = _run(found_daemon, "hello-bin")
    assert (code, exit_code) == (Code.OK, 0) and "hello from node_modules" in output, output


def test_found_toolchains_are_read_only_inside(found_daemon: Daemon) -> None:
    code, _, output = _run(found_daemon, "echo 'echo hijacked' > .venv/bin/pytest")
    assert code is not Code.OK, output
    assert "console_main" in (found_daemon.workspace / ".venv" / "bin" / "pytest").read_text()


def test_auto_detection_can_be_turned_off(tmp_path: Path, workspace: Path) -> None:
    (workspace / ".venv" / "bin").mkdir(parents=True)
    handle = start_daemon(
        tmp_path / "run" / "shellward.sock", tmp_path / "state", workspace,
        "--no-auto-toolchains",
    )  # fmt: skip
    try:
        with Client(handle.socket) as client:
            (status,) = client.status().workspace_status
    finally:
        handle.stop()
    assert status.path == BASE_PATH
