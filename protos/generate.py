"""Regenerate the Python code for the wire contract (``make proto``).

Writes ``shellward/v1/*_pb2*.py[i]`` for every ``.proto`` under ``protos/`` into the
client package (``client/shellward/v1``), or into ``--out`` (the staleness test compares the two).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc  # type: ignore[import-untyped]

PROTO_ROOT = Path(__file__).resolve().parent
PACKAGE_DIR = PROTO_ROOT.parent / "client" / "shellward" / "v1"


def generate(out_dir: Path) -> list[Path]:
    """Generate into ``out_dir`` and return the files written."""
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *protos,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed; see the message above")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for generated in sorted((Path(tmp) / "shellward" / "v1").iterdir()):
            target = out_dir / generated.name
            shutil.copyfile(generated, target)
            written.append(target)
        return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=PACKAGE_DIR, help="output directory")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
