"""Giving freed memory back to the system between the stages of a large load.

glibc keeps what a process frees in its heap for later allocations. On a large trace the
stages free hundreds of MB of columns that were allocated in small pieces (one batch of
events at a time), interleaved with pieces still in use, so the heap cannot shrink from its
top and the process's resident memory only grows: at the next stage's peak, the freed memory
and the new allocations count together. ``malloc_trim(0)`` returns every whole free page
inside the heap to the system (glibc ≥ 2.8, ``madvise``), so a stage's peak is its own.
Elsewhere (musl, macOS) this does nothing.
"""
from __future__ import annotations

import functools
import sys


@functools.cache
def _trim():
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here, not at import: most commands never trim

    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # glibc's soname (ldconfig not asked)
    except (OSError, AttributeError):  # musl and others: no malloc_trim
        return None


# Below this many rows a stage frees a few MB, and a trim (a walk of the heap, ~1-4 ms, and
# the page faults of reusing what it gave back) would cost a small trace's latency for nothing.
LARGE_ROWS = 1_000_000


def release_freed_memory(rows: int) -> None:
    """After a stage over ``rows`` rows: return the heap's free pages to the system (see the
    module doc) when ``rows`` is at least ``LARGE_ROWS``; a no-op where the C library has no
    ``malloc_trim``."""
    if rows >= LARGE_ROWS and (trim := _trim()) is not None:
        trim(0)
