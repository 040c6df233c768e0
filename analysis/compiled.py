"""The compiled loops' one way to numba (a dependency; it was the ``zym[fast]`` extra): a loop
written in plain Python over numpy arrays is compiled once (cached on disk, releasing the
GIL); where numba cannot be imported, callers run the same source interpreted or take a numpy
path (the same results; ~3x the rules' time at 10 M GPU operations)."""
from __future__ import annotations

from collections.abc import Callable


def njit(*loops: Callable) -> tuple[Callable, ...] | None:
    """``loops`` compiled by numba, in order; None without numba."""
    try:
        import numba
    except ImportError:
        return None
    jit = numba.njit(cache=True, nogil=True)
    return tuple(jit(f) for f in loops)
