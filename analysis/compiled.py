"""The compiled loops' one way to numba (the ``zym[fast]`` extra): where it is installed, a
loop written in plain Python over numpy arrays is compiled once (cached on disk, releasing
the GIL); where it is not, callers run the same source interpreted or take a numpy path."""
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
