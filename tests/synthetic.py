"""The synthetic capture ``bench/make_synthetic.py`` writes (seeded: a size makes the same
file), for tests that need thousands of syncs."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def make_synthetic(ops: int, path: Path, **shape: int) -> Path:
    """A synthetic capture of ``ops`` GPU operations at ``path``; ``shape``: what differs from
    the default shape (``make_synthetic.Shape``'s fields: ``sites=2000``, ...)."""
    spec = importlib.util.spec_from_file_location("make_synthetic",
                                                  REPO / "bench" / "make_synthetic.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass looks its module up)
    spec.loader.exec_module(module)
    return module.make(ops, path, shape=module.Shape(**shape))
