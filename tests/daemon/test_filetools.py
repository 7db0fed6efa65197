"""The built-in file tools on their own: real files in a temporary workspace, no daemon.

Every test runs twice: with openat2(2) resolving paths, and with the O_NOFOLLOW walk that
replaces it on kernels without openat2.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

import pytest

from shellwardd.errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from shellwardd.filetools import (
    MAX_LIST_ENTRIES,
    TEMP_SUFFIX,
    EntryKind,
    FileWritePlan,
    _beneath,
    apply_write,
    check_path,
    list_files,
    plan_patch,
    plan_write,
    read_file,
)
from shellwardd.staging.blobs import BlobStore
from shellwardd.watch import content_hash
from tests.daemon.hostile import watching_opens


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


HAVE_OPENAT2 = _beneath.use_openat2


@pytest.fixture(autouse=True, params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "openat2" and not HAVE_OPENAT2:
        pytest.skip("this kernel has no openat2: only the walk can be tested")
    if request.param == "walk":

        def forbidden(*args: object) -> int:
            raise AssertionError("openat2 called although the walk was forced")

        monkeypatch.setattr(_beneath, "use_openat2", False)
        monkeypatch.setattr(_beneath, "_openat2", forbidden)
    return str(request.param)


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    """The store that keeps what a write replaces (a daemon keeps it in its state dir)."""
    return BlobStore(tmp_path / "state" / "blobs")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret").write_text("top secret\n")
    return path


# --- check_path --------------------------------------------------------------------------


def test_check_path_relative_and_absolute_inside(workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "a.py").write_text("x = 1\n")
    assert check_path(workspace, "src/a.py") == "src/a.py"
    assert check_path(workspace, "./src/../src/a.py") == "src/a.py"
    assert check_path(workspace, str(workspace / "src" / "a.py")) == "src/a.py"
    assert check_path(workspace, "new/dir/file.txt") == "new/dir/file.txt"
    assert check_path(workspace, ".") == "."
    assert check_path(workspace, str(workspace)) == "."


def test_a_symlinked_workspace_root_is_the_operators_choice(
    tmp_path: Path, workspace: Path
) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(workspace)
    (workspace / "f").write_text("x")
    assert check_path(alias, str(alias / "f")) == "f"
    assert check_path(alias, str(workspace / "f")) == "f"
    assert read_file(alias, "f").content == b"x"


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../x", ".."])
def test_check_path_refuses_paths_outside(workspace: Path, path: str) -> None:
    with pytest.raises(PermissionDenied, match=r"out(side)? (of )?the workspace"):
        check_path(workspace, path)


def test_check_path_refuses_absolute_path_in_a_sibling(workspace: Path, outside: Path) -> None:
    with pytest.raises(PermissionDenied, match="outside the workspace"):
        check_path(workspace, str(outside / "secret"))


def test_check_path_refuses_symlink_to_a_file_outside(workspace: Path, outside: Path) -> None:
    (workspace / "innocent.txt").symlink_to(outside / "secret")
    with pytest.raises(PermissionDenied, match=r"symlink 'innocent.txt'.*follow no symlink") as err:
        check_path(workspace, "innocent.txt")
    assert str(outside / "secret") in err.value.message


def test_check_path_refuses_symlinked_directory_escaping(workspace: Path, outside: Path) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "escape").symlink_to(outside)
    for path in ("sub/escape/secret", "sub/escape/new.txt", "sub/escape"):
        with pytest.raises(PermissionDenied, match="symlink 'sub/escape'"):
            check_path(workspace, path)


def test_check_path_refuses_dangling_symlink_outside(workspace: Path, tmp_path: Path) -> None:
    # A write through it would create the file outside.
    (workspace / "dangling").symlink_to(tmp_path / "nowhere" / "file")
    with pytest.raises(PermissionDenied, match="symlink 'dangling'"):
        check_path(workspace, "dangling")


def test_symlinks_that_stay_inside_are_refused_too(workspace: Path, blobs: BlobStore) -> None:
    # A link inside now can point outside a moment later: no tool follows any link.
    (workspace / "real.txt").write_text("hi\n")
    (workspace / "link.txt").symlink_to("real.txt")
    (workspace / "d").mkdir()
    (workspace / "dlink").symlink_to("d")
    for path in ("link.txt", "dlink/new.txt"):
        with pytest.raises(PermissionDenied, match="the path the link points to"):
            check_path(workspace, path)
    with pytest.raises(PermissionDenied, match=r"symlink 'link.txt' \(to 'real.txt'\)"):
        read_file(workspace, "link.txt")
    with pytest.raises(PermissionDenied, match="symlink 'dlink'"):
        list_files(workspace, "dlink")
    with pytest.raises(PermissionDenied, match=r"symlink 'link.txt'"):
        plan_write(workspace, "link.txt", b"new", None)
    with pytest.raises(PermissionDenied, match="symlink 'dlink'"):
        apply_write(workspace, FileWritePlan("dlink/new.txt", "", sha(b"x"), b"x"), blobs)
    assert not (workspace / "d" / "new.txt").exists()
    assert (workspace / "real.txt").read_text() == "hi\n"


@pytest.mark.parametrize(
    "path", [".git", ".git/config", "sub/.git/HEAD", "./a/../.git/hooks/pre-commit", ".GIT/x"]
)
def test_check_path_refuses_git_internals(workspace: Path, path: str) -> None:
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("[core]\n")
    with pytest.raises(PermissionDenied, match=r"\.git directory.*git itself"):
        check_path(workspace, path)


def test_check_path_refuses_the_cookie_dir(workspace: Path) -> None:
    with pytest.raises(PermissionDenied, match="bookkeeping"):
        check_path(workspace, ".shellward/cookies/c1")
    assert check_path(workspace, ".shellward/rules.toml") == ".shellward/rules.toml"


@pytest.mark.parametrize("path", ["", "  ", "a\0b"])
def test_check_path_rejects_empty_and_nul(workspace: Path, path: str) -> None:
    with pytest.raises(InvalidArgument):
        check_path(workspace, path)


def test_a_symlink_loop_is_refused_as_a_symlink(workspace: Path) -> None:
    (workspace / "a").symlink_to("b")
    (workspace / "b").symlink_to("a")
    with pytest.raises(PermissionDenied, match="symlink 'a'"):
        read_file(workspace, "a")


# --- the resolver ------------------------------------------------------------------------


def test_open_beneath_opens_only_plain_paths(workspace: Path, outside: Path) -> None:
    (workspace / "a" / "b").mkdir(parents=True)
    (workspace / "a" / "b" / "f").write_bytes(b"deep")
    (workspace / "a" / "up").symlink_to("..")
    (workspace / "a" / "out").symlink_to(outside)
    (workspace / "a" / "b" / "ln").symlink_to("f")
    with _beneath.closing_fd(_beneath.open_root(workspace)) as root:
        with _beneath.closing_fd(_beneath.open_beneath(root, ("a", "b", "f"), os.O_RDONLY)) as fd:
            assert os.read(fd, 10) == b"deep"
        for parts in (("a", "up", "a", "b", "f"), ("a", "out", "secret"), ("a", "b", "ln")):
            with pytest.raises(OSError) as err:
                _beneath.open_beneath(root, parts, os.O_RDONLY)
            assert err.value.errno in (errno.ELOOP, errno.ENOTDIR)
        found = _beneath.find_obstacle
        assert found(root, ("a", "out", "secret")) == _beneath.Obstacle("a/out", str(outside))
        assert found(root, ("a", "b", "f", "x")) == _beneath.Obstacle("a/b/f", None)
        assert found(root, ("a", "b", "f")) is None
        assert found(root, ("a", "missing", "f")) is None


def test_make_dirs_creates_beneath_and_refuses_a_link(workspace: Path, outside: Path) -> None:
    (workspace / "out").symlink_to(outside)
    with _beneath.closing_fd(_beneath.open_root(workspace)) as root:
        with _beneath.closing_fd(_beneath.make_dirs(root, ("x", "y"))) as fd:
            assert os.path.samestat(os.fstat(fd), (workspace / "x" / "y").stat())
        with pytest.raises(OSError):
            _beneath.make_dirs(root, ("out", "new"))
    assert not (outside / "new").exists()


def test_a_kernel_without_openat2_gets_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as elsewhere:  # a syscall number 437 that is not openat2
        elsewhere.setattr(_beneath.platform, "machine", lambda: "mips")
        assert _beneath._kernel_has_openat2() is False
    for refused in (errno.ENOSYS, errno.EPERM):  # old kernel; seccomp profile

        def unsupported(*args: object, err: int = refused) -> int:
            raise OSError(err, os.strerror(err))

        monkeypatch.setattr(_beneath, "_openat2", unsupported)
        assert _beneath._kernel_has_openat2() is False

    def cwd_gone(*args: object) -> int:
        raise FileNotFoundError(errno.ENOENT, "gone")

    monkeypatch.setattr(_beneath, "_openat2", cwd_gone)
    assert _beneath._kernel_has_openat2() is True


# --- hard links and special files --------------------------------------------------------


def test_a_file_with_another_hard_link_is_neither_read_nor_written(
    workspace: Path, outside: Path, blobs: BlobStore
) -> None:
    # A hostile command links a secret into the workspace (same filesystem).
    os.link(outside / "secret", workspace / "innocent.txt")
    with pytest.raises(PermissionDenied, match=r"'innocent.txt' has 2 hard links"):
        read_file(workspace, "innocent.txt")
    with pytest.raises(PermissionDenied, match="hard links"):
        plan_write(workspace, "innocent.txt", b"x", None)
    with pytest.raises(PermissionDenied, match="hard links"):
        plan_patch(workspace, "innocent.txt", "@@ -1 +1 @@\n-top secret\n+x\n", None)
    with pytest.raises(PermissionDenied, match="hard links"):
        apply_write(workspace, FileWritePlan("innocent.txt", "", sha(b"x"), b"x"), blobs)
    assert (outside / "secret").read_text() == "top secret\n"
    assert (workspace / "innocent.txt").read_text() == "top secret\n"


def test_a_fifo_is_refused_by_every_tool_without_being_opened(
    workspace: Path, blobs: BlobStore
) -> None:
    os.mkfifo(workspace / "pipe")
    # Not even opened non-blocking: a reader's open releases a writer blocked on the FIFO,
    # and opening a device can act on it.
    with watching_opens(workspace / "pipe") as opens:
        with pytest.raises(InvalidArgument, match="not a regular file"):
            read_file(workspace, "pipe")
        with pytest.raises(InvalidArgument, match="not a regular file"):
            plan_write(workspace, "pipe", b"x", None)
        assert opens() == 0
        os.close(os.open(workspace / "pipe", os.O_RDONLY | os.O_NONBLOCK))
        assert opens() == 1  # the witness sees an open for I/O
    # A plan made before a FIFO took the file's place is not applied over it either.
    plan = plan_write(workspace, "later", b"x", None)
    os.mkfifo(workspace / "later")
    with pytest.raises(InvalidArgument, match="not a regular file"):
        apply_write(workspace, plan, blobs)
    assert stat.S_ISFIFO(os.lstat(workspace / "later").st_mode)
    assert temp_files(workspace) == []


# --- read_file ---------------------------------------------------------------------------


def test_read_file_returns_content_and_the_hash_of_the_file(workspace: Path) -> None:
    data = b"line one\nline two\n"
    (workspace / "f.txt").write_bytes(data)
    read = read_file(workspace, "f.txt")
    assert (read.path, read.content, read.size, read.truncated) == ("f.txt", data, len(data), False)
    assert read.hash == sha(data) == content_hash(workspace / "f.txt")


def test_read_file_truncates_but_hashes_the_whole_file(workspace: Path) -> None:
    data = bytes(range(256)) * 10
    (workspace / "big.bin").write_bytes(data)
    read = read_file(workspace, "big.bin", max_bytes=100)
    assert read.content == data[:100]
    assert (read.size, read.truncated, read.hash) == (len(data), True, sha(data))
    exact = read_file(workspace, "big.bin", max_bytes=len(data))
    assert (exact.content, exact.truncated) == (data, False)


def test_read_file_errors(workspace: Path) -> None:
    (workspace / "d").mkdir()
    (workspace / "f").write_text("x")
    os.mkfifo(workspace / "pipe")  # must be refused, not block on open
    with pytest.raises(NotFound, match="list_files"):
        read_file(workspace, "missing.txt")
    with pytest.raises(InvalidArgument, match="is a directory"):
        read_file(workspace, "d")
    with pytest.raises(InvalidArgument, match="not a regular file"):
        read_file(workspace, "pipe")
    with pytest.raises(InvalidArgument, match="parent directories is a file"):
        read_file(workspace, "f/x")
    with pytest.raises(InvalidArgument, match="max_bytes"):
        read_file(workspace, "f", max_bytes=0)
    with pytest.raises(PermissionDenied):
        read_file(workspace, "../outside")


# --- list_files --------------------------------------------------------------------------


def make_tree(workspace: Path) -> None:
    (workspace / "b.txt").write_bytes(b"12345")
    (workspace / "a.py").write_bytes(b"x")
    (workspace / "src" / "pkg").mkdir(parents=True)
    (workspace / "src" / "pkg" / "mod.py").write_bytes(b"abc")
    (workspace / "src" / "main.py").write_bytes(b"")
    (workspace / "ln").symlink_to("src")
    (workspace / ".git" / "objects").mkdir(parents=True)
    (workspace / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (workspace / ".shellward" / "cookies").mkdir(parents=True)
    (workspace / ".shellward" / "cookies" / "c1").write_text("")


def test_list_files_one_level(workspace: Path) -> None:
    make_tree(workspace)
    listing = list_files(workspace)
    assert listing.path == "."
    assert [(e.path, e.kind, e.size) for e in listing.entries] == [
        (".git", EntryKind.DIR, 0),
        (".shellward", EntryKind.DIR, 0),
        ("a.py", EntryKind.FILE, 1),
        ("b.txt", EntryKind.FILE, 5),
        ("ln", EntryKind.SYMLINK, 3),
        ("src", EntryKind.DIR, 0),
    ]
    assert not listing.truncated
    assert [e.path for e in list_files(workspace, "src").entries] == ["src/main.py", "src/pkg"]


def test_list_files_recursive_skips_git_and_cookies_and_symlinked_dirs(workspace: Path) -> None:
    make_tree(workspace)
    paths = [e.path for e in list_files(workspace, recursive=True).entries]
    assert paths == [
        ".git",
        ".shellward",
        "a.py",
        "b.txt",
        "ln",
        "src",
        "src/main.py",
        "src/pkg",
        "src/pkg/mod.py",
    ]


def test_list_files_pattern_and_limit(workspace: Path) -> None:
    make_tree(workspace)
    py = list_files(workspace, pattern="*.py", recursive=True)
    assert [e.path for e in py.entries] == ["a.py", "src/main.py", "src/pkg/mod.py"]
    assert not py.truncated
    first = list_files(workspace, pattern="*.py", recursive=True, limit=2)
    assert [e.path for e in first.entries] == ["a.py", "src/main.py"]
    assert first.truncated
    exact = list_files(workspace, pattern="*.py", recursive=True, limit=3)
    assert len(exact.entries) == 3 and not exact.truncated


def test_list_files_errors(workspace: Path) -> None:
    make_tree(workspace)
    with pytest.raises(InvalidArgument, match="read_file"):
        list_files(workspace, "a.py")
    with pytest.raises(NotFound):
        list_files(workspace, "nope")
    with pytest.raises(PermissionDenied):
        list_files(workspace, ".git")
    with pytest.raises(InvalidArgument, match="limit"):
        list_files(workspace, limit=0)
    with pytest.raises(InvalidArgument, match=f"1 to {MAX_LIST_ENTRIES} entries"):
        list_files(workspace, limit=MAX_LIST_ENTRIES + 1)


# --- plan_write --------------------------------------------------------------------------


def test_plan_write_does_not_touch_the_workspace(workspace: Path) -> None:
    (workspace / "f").write_bytes(b"old")
    plan = plan_write(workspace, "f", b"new", None)
    assert plan == FileWritePlan("f", sha(b"old"), sha(b"new"), b"new")
    assert (workspace / "f").read_bytes() == b"old"
    new = plan_write(workspace, "dir/new.txt", b"hello", None)
    assert (new.path, new.before_hash, new.after_hash) == ("dir/new.txt", "", sha(b"hello"))
    assert not (workspace / "dir").exists()


def test_plan_write_base_hash_modes(workspace: Path) -> None:
    (workspace / "f").write_bytes(b"old")
    assert plan_write(workspace, "f", b"x", sha(b"old")).before_hash == sha(b"old")
    assert plan_write(workspace, "new", b"x", "").before_hash == ""
    with pytest.raises(Conflict, match="already exists") as err:
        plan_write(workspace, "f", b"x", "")
    assert sha(b"old") in err.value.message


def test_plan_write_conflict_names_path_expected_and_actual(workspace: Path) -> None:
    (workspace / "f").write_bytes(b"changed by the user")
    with pytest.raises(Conflict) as err:
        plan_write(workspace, "f", b"x", sha(b"what the model read"))
    message = err.value.message
    assert "'f'" in message
    assert sha(b"what the model read") in message
    assert sha(b"changed by the user") in message
    assert "read it again and redo the edit" in message
    with pytest.raises(Conflict, match="does not exist"):
        plan_write(workspace, "gone", b"x", sha(b"old"))


def test_plan_write_refuses_what_it_cannot_replace(workspace: Path) -> None:
    (workspace / "d").mkdir()
    (workspace / "f").write_text("x")
    with pytest.raises(InvalidArgument, match="is a directory"):
        plan_write(workspace, "d", b"x", None)
    with pytest.raises(InvalidArgument, match="parent directories is a file"):
        plan_write(workspace, "f/x", b"x", None)
    with pytest.raises(InvalidArgument, match="not a file hash"):
        plan_write(workspace, "f", b"x", "deadbeef")
    with pytest.raises(PermissionDenied):
        plan_write(workspace, ".git/config", b"x", None)


# --- plan_patch --------------------------------------------------------------------------


def patched(workspace: Path, before: bytes, patch: str) -> bytes:
    (workspace / "f.txt").write_bytes(before)
    plan = plan_patch(workspace, "f.txt", patch, None)
    assert (plan.before_hash, plan.after_hash) == (sha(before), sha(plan.content))
    assert (workspace / "f.txt").read_bytes() == before
    return plan.content


def test_patch_changes_a_line(workspace: Path) -> None:
    patch = "--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"
    assert patched(workspace, b"one\ntwo\nthree\n", patch) == b"one\nTWO\nthree\n"


def test_patch_adds_and_removes_lines(workspace: Path) -> None:
    add = "@@ -1,2 +1,4 @@\n one\n+one and a half\n+one and three quarters\n two\n"
    assert patched(workspace, b"one\ntwo\n", add) == (
        b"one\none and a half\none and three quarters\ntwo\n"
    )
    remove = "--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,1 @@\n-one\n-two\n three\n"
    assert patched(workspace, b"one\ntwo\nthree\n", remove) == b"three\n"


def test_patch_applies_several_hunks(workspace: Path) -> None:
    before = b"".join(b"line %d\n" % n for n in range(1, 21))
    patch = (
        "--- a/f.txt\n+++ b/f.txt\n"
        "@@ -2,3 +2,3 @@\n line 2\n-line 3\n+LINE 3\n line 4\n"
        "@@ -10,3 +10,4 @@\n line 10\n line 11\n+line 11.5\n line 12\n"
        "@@ -18,3 +19,2 @@\n line 18\n-line 19\n line 20\n"
    )
    after = patched(workspace, before, patch).split(b"\n")
    assert after[2] == b"LINE 3"
    assert after[11] == b"line 11.5"
    assert b"line 19" not in after
    assert len(after) == 21  # 20 lines + 1 added - 1 removed, and the final newline


def test_patch_tolerates_wrong_line_numbers_but_not_wrong_context(workspace: Path) -> None:
    before = b"a\nb\nc\nd\ne\n"
    assert patched(workspace, before, "@@ -1,2 +1,2 @@\n d\n-e\n+E\n") == b"a\nb\nc\nd\nE\n"


def test_patch_reads_a_blank_context_line_without_its_space(workspace: Path) -> None:
    assert patched(workspace, b"a\n\nb\n", "@@ -1,3 +1,3 @@\n a\n\n-b\n+B\n") == b"a\n\nB\n"


def test_patch_creates_a_file_from_dev_null(workspace: Path) -> None:
    patch = "--- /dev/null\n+++ b/new/file.py\n@@ -0,0 +1,2 @@\n+print('hi')\n+print('bye')\n"
    plan = plan_patch(workspace, "new/file.py", patch, "")
    assert plan.content == b"print('hi')\nprint('bye')\n"
    assert (plan.path, plan.before_hash) == ("new/file.py", "")
    (workspace / "exists.py").write_text("x\n")
    with pytest.raises(Conflict, match="already exists"):
        plan_patch(workspace, "exists.py", patch, None)


def test_patch_no_newline_at_end_of_file(workspace: Path) -> None:
    change_last = (
        "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
    )
    assert patched(workspace, b"a\nb", change_last) == b"a\nc"
    add_newline = "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"
    assert patched(workspace, b"a\nb", add_newline) == b"a\nb\n"
    drop_newline = "@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n"
    assert patched(workspace, b"a\nb\n", drop_newline) == b"a\nb"
    # The model forgot the marker and appended after an unterminated line: no fused lines.
    assert patched(workspace, b"a\nb", "@@ -2 +2,2 @@\n b\n+c\n") == b"a\nb\nc\n"


def test_patch_keeps_crlf_line_endings(workspace: Path) -> None:
    before = b"one\r\ntwo\r\nthree\r\n"
    patch = "@@ -1,3 +1,4 @@\n one\n-two\n+TWO\n+2.5\n three\n"
    assert patched(workspace, before, patch) == b"one\r\nTWO\r\n2.5\r\nthree\r\n"
    crlf_patch = patch.replace("\n", "\r\n")
    assert patched(workspace, before, crlf_patch) == b"one\r\nTWO\r\n2.5\r\nthree\r\n"


def test_patch_reports_the_first_hunk_that_does_not_apply(workspace: Path) -> None:
    (workspace / "f.txt").write_bytes(b"a\nb\nc\nd\ne\nf\n")
    patch = "@@ -1,2 +1,2 @@\n a\n-b\n+B\n@@ -4,2 +4,2 @@\n d\n-x\n+X\n"
    with pytest.raises(Conflict) as err:
        plan_patch(workspace, "f.txt", patch, None)
    message = err.value.message
    assert "Hunk 2" in message and "line 5" in message
    assert "'x'" in message and "'e'" in message
    assert "read the file again" in message


def test_patch_respects_base_hash(workspace: Path) -> None:
    (workspace / "f.txt").write_bytes(b"a\n")
    patch = "@@ -1 +1 @@\n-a\n+b\n"
    assert plan_patch(workspace, "f.txt", patch, sha(b"a\n")).content == b"b\n"
    with pytest.raises(Conflict, match="changed since you read it"):
        plan_patch(workspace, "f.txt", patch, sha(b"something else"))
    with pytest.raises(Conflict, match="already exists"):
        plan_patch(workspace, "f.txt", patch, "")


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ("just some text\n", "no hunks"),
        ("--- a/f.txt\n+++ b/f.txt\n", "no hunks"),
        ("@@ -1 +1 @@\n-a\n+b\nstray text\n", "outside any hunk"),
        ("@@ -1,2 +1,2 @@\n a\n-b\n", "line counts"),  # ends early
        ("@@ -1 +1 @@\n-a\n-b\n+c\n", "line counts"),  # more lines than counted
        ("@@ -1 +1 @@\n-a\n+b\n--- a/g\n+++ b/g\n@@ -1 +1 @@\n-x\n+y\n", "more than one file"),
        ("--- a/f.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n", "deletes the file"),
    ],
)
def test_patch_rejects_malformed_patches(workspace: Path, patch: str, message: str) -> None:
    (workspace / "f.txt").write_bytes(b"a\nb\n")
    with pytest.raises(InvalidArgument, match=message):
        plan_patch(workspace, "f.txt", patch, None)


def test_patch_of_a_missing_file_is_not_found(workspace: Path) -> None:
    with pytest.raises(NotFound, match="/dev/null"):
        plan_patch(workspace, "missing.txt", "@@ -1 +1 @@\n-a\n+b\n", None)


# --- apply_write -------------------------------------------------------------------------


def temp_files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.name.endswith(TEMP_SUFFIX)]


def test_apply_write_creates_parent_directories(workspace: Path, blobs: BlobStore) -> None:
    plan = plan_write(workspace, "a/b/c.txt", b"deep", "")
    apply_write(workspace, plan, blobs)
    assert (workspace / "a" / "b" / "c.txt").read_bytes() == b"deep"
    assert content_hash(workspace / "a" / "b" / "c.txt") == plan.after_hash
    assert temp_files(workspace) == []


def test_apply_write_keeps_the_mode_of_an_existing_file(workspace: Path, blobs: BlobStore) -> None:
    script = workspace / "run.sh"
    script.write_bytes(b"#!/bin/sh\necho old\n")
    script.chmod(0o751)
    apply_write(workspace, plan_write(workspace, "run.sh", b"#!/bin/sh\necho new\n", None), blobs)
    assert stat.S_IMODE(script.stat().st_mode) == 0o751
    assert script.read_bytes() == b"#!/bin/sh\necho new\n"


def test_apply_write_keeps_no_set_uid_bit(workspace: Path, blobs: BlobStore) -> None:
    # A sandboxed process marks its file set-uid; a root daemon's write must not make a
    # set-uid-root program of it.
    tool = workspace / "tool"
    tool.write_bytes(b"old")
    tool.chmod(0o6755)
    apply_write(workspace, plan_write(workspace, "tool", b"new", None), blobs)
    assert stat.S_IMODE(tool.stat().st_mode) == 0o755


def test_apply_write_gives_a_new_file_the_umask_mode(workspace: Path, blobs: BlobStore) -> None:
    old = os.umask(0o027)
    try:
        apply_write(workspace, plan_write(workspace, "new.txt", b"x", None), blobs)
    finally:
        os.umask(old)
    assert stat.S_IMODE((workspace / "new.txt").stat().st_mode) == 0o640


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_apply_write_failure_leaves_the_original_and_no_temp_file(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, failing: str, blobs: BlobStore
) -> None:
    target = workspace / "f.txt"
    target.write_bytes(b"original\n")
    plan = plan_write(workspace, "f.txt", b"replacement\n", None)

    real = getattr(os, failing)

    def crash(*args: object, **kwargs: object) -> None:
        if failing == "fsync" and not os.readlink(f"/proc/self/fd/{args[0]}").startswith(
            str(workspace)
        ):
            return real(*args)  # the before-image is kept; the write's own fsync fails
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, crash)
    with pytest.raises(OSError, match="No space left"):
        apply_write(workspace, plan, blobs)
    monkeypatch.undo()
    assert target.read_bytes() == b"original\n"
    assert temp_files(workspace) == []


def test_apply_write_refuses_a_plan_whose_path_now_escapes(
    workspace: Path, outside: Path, blobs: BlobStore
) -> None:
    plan = plan_write(workspace, "sub/f.txt", b"x", None)
    (workspace / "sub").symlink_to(outside)
    with pytest.raises(PermissionDenied, match="symlink 'sub'"):
        apply_write(workspace, plan, blobs)
    assert not (outside / "f.txt").exists()


def stored(blobs: BlobStore) -> dict[str, bytes]:
    """Every blob in the store: its name → its content."""
    return {p.name: p.read_bytes() for p in blobs.root.glob("*/*")}


def test_apply_write_keeps_the_content_it_replaces_before_replacing_it(
    workspace: Path, blobs: BlobStore
) -> None:
    (workspace / "f.txt").write_bytes(b"old\n")
    before = apply_write(workspace, plan_write(workspace, "f.txt", b"new\n", None), blobs)
    assert before == sha(b"old\n")
    assert stored(blobs) == {before.removeprefix("sha256:"): b"old\n"}
    assert (workspace / "f.txt").read_bytes() == b"new\n"
    # A new file replaces nothing: nothing to keep.
    assert apply_write(workspace, plan_write(workspace, "g.txt", b"g", ""), blobs) == ""
    assert len(stored(blobs)) == 1


def test_a_link_swapped_in_after_the_plan_never_puts_an_outside_file_in_the_store(
    workspace: Path, outside: Path, blobs: BlobStore
) -> None:
    # The attack: the plan sees plain files; then the file, or its directory, becomes a
    # link to a secret outside, which a before-image read by name would copy into the
    # daemon's store (where an undo would later write it into the workspace).
    (workspace / "f.txt").write_bytes(b"inside\n")
    (workspace / "d").mkdir()
    (workspace / "d" / "secret").write_bytes(b"inside\n")
    file_plan = plan_write(workspace, "f.txt", b"x", None)
    dir_plan = plan_write(workspace, "d/secret", b"x", None)
    (workspace / "f.txt").unlink()
    (workspace / "f.txt").symlink_to(outside / "secret")
    os.rename(workspace / "d", workspace / "d.moved")
    (workspace / "d").symlink_to(outside)
    with pytest.raises(PermissionDenied, match="symlink"):
        apply_write(workspace, file_plan, blobs)
    with pytest.raises(PermissionDenied, match="symlink"):
        apply_write(workspace, dir_plan, blobs)
    assert stored(blobs) == {}
    assert (outside / "secret").read_text() == "top secret\n"
    assert os.path.islink(workspace / "f.txt") and os.path.islink(workspace / "d")


def test_a_write_whose_before_image_cannot_be_kept_writes_nothing(
    workspace: Path, blobs: BlobStore
) -> None:
    (workspace / "f.txt").write_bytes(b"original\n")
    plan = plan_write(workspace, "f.txt", b"replacement\n", None)
    # The store broken under the daemon (a root daemon writes into any mode, so a file
    # where the store's directory was stands for a full or read-only state dir).
    blobs.root.rmdir()
    blobs.root.write_bytes(b"")
    with pytest.raises(Unavailable, match="Nothing was written") as refused:
        apply_write(workspace, plan, blobs)
    assert "f.txt" in refused.value.message and str(blobs.root) in refused.value.message
    assert (workspace / "f.txt").read_bytes() == b"original\n"
    assert temp_files(workspace) == []


def test_a_base_hash_is_checked_again_right_before_the_write(
    workspace: Path, blobs: BlobStore
) -> None:
    # Another writer goes first between the plan and the write (the call waited for its
    # workspace): an edit based on what the model read must not overwrite that change.
    (workspace / "f.txt").write_bytes(b"read\n")
    edit = plan_write(workspace, "f.txt", b"edit\n", sha(b"read\n"))
    create = plan_write(workspace, "g.txt", b"mine\n", "")
    (workspace / "f.txt").write_bytes(b"someone else's\n")
    (workspace / "g.txt").write_bytes(b"theirs\n")
    with pytest.raises(Conflict, match="changed since you read it"):
        apply_write(workspace, edit, blobs)
    with pytest.raises(Conflict, match="must not"):
        apply_write(workspace, create, blobs)
    assert (workspace / "f.txt").read_bytes() == b"someone else's\n"
    assert (workspace / "g.txt").read_bytes() == b"theirs\n"
    # Without a base hash the write replaces whatever is there, as asked.
    apply_write(workspace, plan_write(workspace, "f.txt", b"any\n", None), blobs)
    assert (workspace / "f.txt").read_bytes() == b"any\n"


def test_a_patch_round_trip_from_read_to_replay(workspace: Path, blobs: BlobStore) -> None:
    (workspace / "app.py").write_bytes(b"def f():\n    return 1\n")
    read = read_file(workspace, "app.py")
    patch = "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2\n"
    plan = plan_patch(workspace, "app.py", patch, read.hash)
    apply_write(workspace, plan, blobs)
    assert read_file(workspace, "app.py").content == b"def f():\n    return 2\n"
    assert read_file(workspace, "app.py").hash == plan.after_hash
    with pytest.raises(Conflict):  # the same patch again, on the old base hash
        plan_patch(workspace, "app.py", patch, read.hash)
