"""The synthetic capture ``bench/make_synthetic.py`` writes (seeded: a size makes the same
file), for tests that need thousands of syncs."""
from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def make_synthetic(ops: int, path: Path) -> Path:
    """A synthetic capture of ``ops`` GPU operations at ``path``."""
    spec = importlib.util.spec_from_file_location("make_synthetic",
                                                  REPO / "bench" / "make_synthetic.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make(ops, path)
