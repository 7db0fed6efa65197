"""How big the undo store grows under a representative editing workload, and what an undo costs.

A daemon with a workspace of FILES source-like files (4 KiB each, in 10 packages); then
ROUNDS rounds of: edit one package's files in place (`sed -i`) and append to a log; delete
and re-create one file; rename one package directory and back. Prints the workspace size,
the blob store's size and blob count (before-images are content-addressed: a content seen
before is stored once), and the time of one undo of the last edit.

    python bench/undo_store.py [--files 500] [--rounds 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers import start_daemon  # noqa: E402


def _size(root: Path) -> tuple[int, int]:
    total = count = 0
    for folder, _, names in os.walk(root):
        for name in names:
            total += os.lstat(os.path.join(folder, name)).st_size
            count += 1
    return total, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "ws"
        for i in range(args.files):
            path = workspace / f"pkg{i % 10}" / f"mod{i}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text((f"def f{i}(x):\n    return x + {i}\n" * 128)[:4096])
        daemon = start_daemon(Path(tmp) / "s.sock", Path(tmp) / "state", workspace)
        try:
            with daemon.client() as client:
                last_edit = ""
                for r in range(args.rounds):
                    edit = client.run_command(
                        f"sed -i 's/return x/return x * {r + 2}/' pkg{r % 10}/mod*.py"
                        f" && echo round {r} >> log.txt",
                        cwd=workspace,
                    )
                    last_edit = edit.call_id
                    client.run_command(
                        f"rm pkg{(r + 1) % 10}/mod{(r + 1) % 10}.py && "
                        f"printf 'x = {r}\\n' > pkg{(r + 1) % 10}/mod{(r + 1) % 10}.py",
                        cwd=workspace,
                    )
                    client.run_command(
                        f"mv pkg{r % 10} moved && mv moved pkg{r % 10}", cwd=workspace
                    )
                start = time.perf_counter()
                undone = client.undo(last_edit, cwd=workspace)
                undo_ms = (time.perf_counter() - start) * 1000
                print(f"undo of the last edit: {undone.code.value}, {undo_ms:.0f} ms")
        finally:
            daemon.stop()
        ws_bytes, ws_files = _size(workspace)
        blob_bytes, blobs = _size(Path(tmp) / "state" / "blobs")
        print(f"workspace: {ws_files} files, {ws_bytes / 1024:.0f} KiB")
        print(f"undo store after {args.rounds} rounds: {blobs} blobs, {blob_bytes / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
