"""`pip install .` outside the checkout: the wheel holds every module and the built-in rules."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import importlib, pkgutil, shellward, shellwardd
from shellwardd.classifier import Classifier, load_rules
for package in (shellward, shellwardd):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not module.name.endswith(".__main__"):  # runs the program
            importlib.import_module(module.name)
print(shellwardd.__file__)
print(Classifier(load_rules()).classify("npm publish").replay_policy.value)
"""


def test_wheel_installs_and_finds_its_rules_outside_the_checkout(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("shellward-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {
        str(path.relative_to(root)) for root in (ROOT / "daemon", ROOT / "client")
        for path in root.rglob("*.py")
    }  # fmt: skip
    missing = sorted(sources - names)
    assert not missing, (
        f"modules missing from the wheel (add their packages to pyproject): {missing}"
    )
    rules = {f"shellwardd/builtin_rules/{p.name}" for p in (ROOT / "rules").glob("*.toml")}
    assert rules and rules <= names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    # Run from elsewhere, with the wheel's copy first on the path: -I ignores the editable
    # install's path hooks and the checkout; the dependencies come from this interpreter.
    deps = [p for p in sys.path if p.endswith("site-packages")]
    probe = subprocess.run(
        [sys.executable, "-I", "-c",
         f"import sys; sys.path[:0] = {[str(site), *deps]!r}\n" + PROBE],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    location, policy = probe.stdout.split()
    assert location.startswith(str(site)), f"imported the checkout, not the wheel: {location}"
    assert policy == "never"
