"""The synthetic capture ``bench/make_synthetic.py`` writes (seeded: a size makes the same
file), for tests that need thousands of syncs; a small decode server built call by call."""
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


SERVE = [("python", "serve", "srv.py", 5)]
BATCH = SERVE + [("python", "handle_batch", "srv.py", 30)]


def decode_server(path: Path, requests: int = 240, gemm_us: float = 40) -> Path:
    """A decode server, every request alike (``zym.rules.testing.CaptureBuilder``): launches,
    a scalar read back, a pageable copy back and host work between requests."""
    from zym.rules.testing import CaptureBuilder

    b = CaptureBuilder()
    for _ in range(requests):
        with b.enclosing(BATCH):
            for _ in range(6):
                b.kernel(BATCH + [("python", "forward", "model.py", 12),
                                  ("torch_op", "aten::mm")], "gemm", gpu_us=gemm_us)
            b.scalar_readback(BATCH + [("python", "decode", "srv.py", 41)])
            b.copy(BATCH + [("python", "strip", "srv.py", 44)], "DtoH", nbytes=4096)
            b.tick(30)
        b.tick(60)
    return b.write(path)
