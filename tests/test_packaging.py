"""`pip install .` must ship every subpackage the repo maps into `zym`, with its data files."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parent.parent


def _mapped_packages() -> dict[str, str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    return config["package-dir"]


def test_wheel_contains_every_subpackage_and_data(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(REPO)], capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = next(tmp_path.glob("zym-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for package, folder in _mapped_packages().items():
        root = REPO / folder
        for init in root.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            rel = init.relative_to(root).with_suffix("").parent
            dotted = ".".join((*package.split("."), *rel.parts))
            target = "/".join(dotted.split(".")) + "/__init__.py"
            assert target in names, f"{dotted} ({init.parent}) is not in the wheel: list it in pyproject"
        for py in root.rglob("*.py"):
            if "__pycache__" not in py.parts and (py.parent / "__init__.py").exists():
                target = "/".join(package.split(".")) + "/" + str(py.relative_to(root))
                assert target in names, f"{py} is not in the wheel"
    assert "zym/schemas/README.md" in names or any(n.startswith("zym/schemas/") for n in names)
    from zym.capture import kineto_json

    if kineto_json._kineto_scan is not None:  # it builds here: the wheel carries it
        assert any(n.startswith("zym/capture/_kineto_scan.") and n.endswith(".so")
                   for n in names), "the compiled JSON decoder is not in the wheel"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "zym = zym.cli.entry:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
