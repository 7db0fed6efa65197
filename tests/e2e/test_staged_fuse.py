"""Staged execution on both overlays (``--overlay kernel`` and ``--overlay fuse``): the same
exact effects and commit, the same sandbox, and fuse-overlayfs ends with its call (real bwrap,
real mounts, real fuse-overlayfs)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellward import Client, EffectKind
from tests.helpers import Daemon, start_daemon, unique_sleep

pytestmark = pytest.mark.skipif(
    shutil.which("fuse-overlayfs") is None or not os.access("/dev/fuse", os.R_OK | os.W_OK),
    reason="needs fuse-overlayfs and a usable /dev/fuse (make system-deps)",
)


@pytest.fixture(params=["kernel", "fuse"])
def overlay(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def staged(tmp_path: Path, workspace: Path, overlay: str) -> Iterator[Daemon]:
    handle = start_daemon(
        tmp_path / "run" / "shellward.sock", tmp_path / "state", workspace, "--overlay", overlay
    )
    yield handle
    handle.stop(signal.SIGKILL if handle.process.poll() is None else signal.SIGTERM)


@pytest.fixture
def client(staged: Daemon) -> Iterator[Client]:
    with staged.client() as c:
        yield c


def _tree(workspace: Path) -> list[str]:
    """What the workspace holds, but the write detector's own directory."""
    paths = (str(p.relative_to(workspace)) for p in workspace.rglob("*"))
    return sorted(p for p in paths if p.split("/")[0] != ".shellward")


def test_status_names_the_overlay_in_force(client: Client, overlay: str) -> None:
    controls = {c.control: c.state for c in client.status().containment}
    expected = "fuse-overlayfs" if overlay == "fuse" else "kernel overlayfs"
    assert controls["workspace writes"].startswith(f"staged: {expected} ")


def test_writes_deletes_and_renames_are_exact_and_committed(
    client: Client, workspace: Path
) -> None:
    (workspace / "keep.txt").write_text("old\n")
    (workspace / "gone.txt").write_text("bye\n")
    (workspace / "old-name.txt").write_text("moved\n")
    (workspace / "tree").mkdir()
    (workspace / "tree" / "a").write_text("a\n")
    result = client.run_command(
        "echo new > new.txt && echo changed > keep.txt && rm gone.txt && "
        "mv old-name.txt new-name.txt && rm -r tree && mkdir tree && echo c > tree/c",
        cwd=workspace,
    )
    assert result.ok, result.content
    effects = {e.path: e for e in result.file_effects}
    assert {path: e.kind for path, e in effects.items()} == {
        "gone.txt": EffectKind.DELETED,
        "keep.txt": EffectKind.MODIFIED,
        "new-name.txt": EffectKind.RENAMED,
        "new.txt": EffectKind.CREATED,
        "tree/a": EffectKind.DELETED,
        "tree/c": EffectKind.CREATED,
    }
    assert effects["new-name.txt"].renamed_from == "old-name.txt"
    assert _tree(workspace) == ["keep.txt", "new-name.txt", "new.txt", "tree", "tree/c"]
    assert (workspace / "keep.txt").read_text() == "changed\n"
    # Nothing of either overlay's bookkeeping reaches the workspace.
    assert not list(workspace.rglob(".wh.*"))


def test_the_command_has_no_capability_and_cannot_reach_the_overlay_process(
    client: Client, workspace: Path
) -> None:
    result = client.run_command(
        "grep CapEff /proc/self/status; cat /proc/[0-9]*/comm; "
        "test -e /dev/fuse && echo fuse-device; "
        "kill -9 -1 2>/dev/null; umount -l . 2>&1 || echo unmount-refused; "
        "echo still > after.txt",
        cwd=workspace,
    )
    assert result.ok, result.content
    out = result.stdout.text
    assert "CapEff:\t0000000000000000" in out
    assert "fuse-overlayfs" not in out  # another pid namespace: not visible, not killable
    assert "fuse-device" not in out
    assert "unmount-refused" in out
    assert (workspace / "after.txt").read_text() == "still\n"


def test_nothing_of_the_overlay_outlives_its_call(
    client: Client, staged: Daemon, workspace: Path
) -> None:
    results = [client.run_command(f"echo {n} > f{n}", cwd=workspace) for n in range(3)]
    assert all(result.ok for result in results)
    calls = [result.call_id for result in results]
    assert _survivors(staged.state_dir / "staging", calls) == ([], [])


def test_a_timed_out_call_leaves_no_overlay_process(
    client: Client, staged: Daemon, workspace: Path
) -> None:
    result = client.run_command(f"echo x > f && {unique_sleep(60)}", cwd=workspace, timeout=1)
    assert not result.ok
    assert _survivors(staged.state_dir / "staging", [result.call_id]) == ([], [])


def _survivors(staging: Path, calls: list[str]) -> tuple[list[str], list[str]]:
    """Processes whose argv names ``staging`` (a fuse-overlayfs), and processes whose mount
    namespace still holds one of the calls' overlays (mounted on ``call-<id>``, or naming
    ``staging`` in its options)."""
    marks = [str(staging), *(f"/call-{call}" for call in calls)]
    survivors, mounts = [], []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if str(staging) in (proc / "cmdline").read_text():
                survivors.append(proc.name)
            mountinfo = (proc / "mountinfo").read_text()
            if any(mark in mountinfo for mark in marks):
                mounts.append(proc.name)
        except OSError:
            continue  # ended while we looked
    return survivors, mounts


@pytest.fixture
def overlay_state_dir(tmp_path: Path) -> Iterator[Path]:
    """A state directory on an overlayfs mount: the kernel refuses it as an upper layer."""
    layers = tmp_path / "layers"
    for name in ("lower", "upper", "work", "merged"):
        (layers / name).mkdir(parents=True)
    options = f"lowerdir={layers}/lower,upperdir={layers}/upper,workdir={layers}/work"
    subprocess.run(
        ["mount", "-t", "overlay", "shellward-test", "-o", options, str(layers / "merged")],
        check=True,
    )
    yield layers / "merged" / "state"
    subprocess.run(["umount", "-l", str(layers / "merged")], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts an overlayfs for the state directory")
def test_auto_falls_back_to_fuse_where_the_kernel_refuses(
    tmp_path: Path, workspace: Path, overlay_state_dir: Path
) -> None:
    socket = tmp_path / "run" / "shellward.sock"
    with pytest.raises(RuntimeError, match="kernel overlayfs in the call's mount namespace"):
        start_daemon(socket, overlay_state_dir, workspace, "--overlay", "kernel")
    daemon = start_daemon(socket, overlay_state_dir, workspace)  # --overlay auto
    try:
        with daemon.client() as client:
            controls = {c.control: c.state for c in client.status().containment}
            assert controls["workspace writes"].startswith("staged: fuse-overlayfs ")
            result = client.run_command("echo staged > out.txt", cwd=workspace)
            assert result.ok, result.content
            assert [(e.path, e.kind) for e in result.file_effects] == [
                ("out.txt", EffectKind.CREATED)
            ]
        assert (workspace / "out.txt").read_text() == "staged\n"
    finally:
        daemon.stop()
