"""The committed generated code is what `make proto` produces from protos/ now."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("proto_generate", ROOT / "protos" / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["proto_generate"] = module
    spec.loader.exec_module(module)
    return module


def test_committed_generated_code_is_fresh(tmp_path: Path) -> None:
    written = _load_generator().generate(tmp_path)
    assert written, "the generator wrote nothing"
    committed_dir = ROOT / "client" / "shellward" / "v1"
    stale = [
        path.name
        for path in written
        if not (committed_dir / path.name).exists()
        or (committed_dir / path.name).read_bytes() != path.read_bytes()
    ]
    assert not stale, f"generated code is stale for {stale}: run `make proto` and commit"
