"""The compiled loops' one way to numba (a dependency; it was the ``zym[fast]`` extra): a loop
written in plain Python over numpy arrays is compiled once (cached on disk, releasing the
GIL); where numba cannot be imported, callers run the same source interpreted or take a numpy
path (the same results; at 1-10 M GPU operations the whole analysis took 3-11x as long:
docs/benchmarks.md, "Twenty-third round")."""
from __future__ import annotations

from collections.abc import Callable


def njit(*loops: Callable, inline: bool = False) -> tuple[Callable, ...] | None:
    """``loops`` compiled by numba, in order; None without numba. ``inline``: the loops are
    helpers, inlined into the compiled loops that call them (numba's ``inline="always"``)."""
    try:
        import numba
    except ImportError:
        return None
    options = {"nogil": True, **({"inline": "always"} if inline else {})}
    return tuple(_compiled(numba, loop, options) for loop in loops)


def _compiled(numba, loop: Callable, options: dict) -> Callable:
    """``loop`` compiled and cached on disk, or compiled in each process where no cache can be
    written: numba refuses ``cache=True`` (a RuntimeError, "no locator available") where
    neither the module's folder nor the user's cache folder is writable (a read-only install
    and home, as in some containers)."""
    try:
        return numba.njit(cache=True, **options)(loop)
    except RuntimeError as e:
        if "cannot cache" not in str(e):  # another failure: not this one's to hide
            raise
        return numba.njit(cache=False, **options)(loop)
