"""Giving freed memory back to the system between the stages of a large load.

glibc keeps what a process frees in its heap for later allocations. On a large trace the
stages free hundreds of MB of columns that were allocated in small pieces (one batch of
events at a time), interleaved with pieces still in use, so the heap cannot shrink from its
top and the process's resident memory only grows: at the next stage's peak, the freed memory
and the new allocations count together. ``malloc_trim(0)`` returns every whole free page
inside the heap to the system (glibc ≥ 2.8, ``madvise``), so a stage's peak is its own.
Elsewhere (musl, macOS) this does nothing.

polars allocates its columns through its own jemalloc, which ``malloc_trim`` cannot reach:
jemalloc keeps freed pages for 0.5-1.5 s (polars' ``dirty_decay_ms:500,muzzy_decay_ms:1000``)
and gives them back only as later allocations let its decay clock tick, so at x40 the
~350 MB of columns one stage dropped still counted at the next stage's peak. jemalloc's own
call for this, ``mallctl("arena.<all>.purge")``, is not exported by polars' library: its
address is read from the library's symbol table (``polars_mallctl``), checked, and the purge
is skipped wherever any check fails (a stripped build, another allocator, a file replaced
since it was loaded). Setting ``_RJEM_MALLOC_CONF=dirty_decay_ms:0,muzzy_decay_ms:0`` instead
gives pages back at every free: measured 1.26x the CPU time at x40 (docs/benchmarks.md).
"""
from __future__ import annotations

import functools
import os
import struct
import sys
from collections.abc import Callable
from typing import Any


@functools.cache
def _trim():
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here, not at import: most commands never trim

    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # glibc's soname (ldconfig not asked)
    except (OSError, AttributeError):  # musl and others: no malloc_trim
        return None


# jemalloc's MALLCTL_ARENAS_ALL: "arena.4096.purge" purges every arena.
_PURGE_ALL = b"arena.4096.purge"
_MALLCTL = b"_rjem_mallctl"  # jemalloc's mallctl under the prefix Rust's tikv-jemallocator gives


def _mapped_library(marker: str) -> tuple[str, int, int] | None:
    """(path, load address, inode) of the shared library loaded in this process whose file
    name starts with ``marker``, from ``/proc/self/maps`` (its mapping at file offset 0)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if (len(parts) >= 6 and parts[2] == "00000000"
                        and os.path.basename(parts[5]).startswith(marker)
                        and parts[5].endswith(".so")):
                    return parts[5], int(parts[0].split("-")[0], 16), int(parts[4])
    except OSError:
        pass
    return None


def elf_function_offset(path: str, name: bytes) -> tuple[int, int] | None:
    """(address relative to the load address, size) of the function ``name`` in the symbol
    table (``.symtab``, which includes local symbols) of the 64-bit little-endian ELF shared
    library ``path``; None when the file is not one, is stripped or has no such function."""
    import numpy as np

    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            phoff, shoff = struct.unpack_from("<QQ", head, 0x20)
            phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 0x36)
            f.seek(phoff)
            ph = f.read(phentsize * phnum)
            loads = [struct.unpack_from("<IIQQ", ph, i * phentsize) for i in range(phnum)]
            first = min((vaddr - off for kind, _, off, vaddr in loads if kind == 1), default=None)
            f.seek(shoff)
            sh = f.read(shentsize * shnum)
            secs = [struct.unpack_from("<IIQQQQIIQQ", sh, i * shentsize) for i in range(shnum)]
            symtab = next((s for s in secs if s[1] == 2), None)  # SHT_SYMTAB
            if first is None or symtab is None or symtab[6] >= len(secs):
                return None
            strtab = secs[symtab[6]]
            f.seek(strtab[4])
            strings = f.read(strtab[5])
            at = strings.find(b"\0" + name + b"\0")
            if at < 0:
                return None
            f.seek(symtab[4])
            syms = np.frombuffer(f.read(symtab[5] - symtab[5] % 24), dtype=np.dtype(
                [("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),
                 ("value", "<u8"), ("size", "<u8")]))
    except (OSError, struct.error, ValueError):
        return None
    hit = syms[(syms["name"] == at + 1) & ((syms["info"] & 0xF) == 2) & (syms["shndx"] != 0)]
    if len(hit) != 1:  # STT_FUNC, defined here
        return None
    return int(hit["value"][0]) - first, int(hit["size"][0])


def _function_offset(path: str, name: bytes) -> tuple[int, int] | None:
    """:func:`elf_function_offset`, kept in zym's cache (``zym.schemas.jsoncache``) for this
    very file (path, inode, size, modification time): reading the symbol table takes 0.05-0.2 s
    (~40 MB of polars' library); a kept answer is still checked by the caller (jemalloc's
    version) before any use."""
    import hashlib

    from . import jsoncache

    try:
        st = os.stat(path)
    except OSError:
        return None
    key = hashlib.sha256(f"{path}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0"
                         f"{name.decode()}".encode()).hexdigest()
    def load(kept: Any) -> tuple[int, int]:
        if not (type(kept) is list and len(kept) == 2
                and all(type(v) is int and v > 0 for v in kept)):
            raise ValueError("not an offset and a size")
        return kept[0], kept[1]

    return jsoncache.remembered(
        _CACHE_KIND, key, lambda: elf_function_offset(path, name), load=load,
        dump=lambda found: None if found is None else jsoncache.dumps(list(found)))


_CACHE_KIND = "symbols"


@functools.cache
def _polars_purge() -> Callable[[], int] | None:
    """A call that purges polars' jemalloc (0 on success), or None (see ``polars_mallctl``)."""
    mallctl = polars_mallctl()
    if mallctl is None:
        return None
    return lambda: mallctl(_PURGE_ALL, None, None, None, 0)


@functools.cache
def polars_mallctl() -> Callable[..., int] | None:
    """polars' jemalloc ``mallctl`` (name, oldp, oldlenp, newp, newlen; 0 on success), or None
    where it cannot be found and checked: Linux only, polars loaded, the library file on disk
    the one mapped (same inode), the function in its symbol table, and jemalloc answering
    ``mallctl("version")`` with a version string."""
    if not sys.platform.startswith("linux") or "polars" not in sys.modules:
        return None
    import ctypes

    mapped = _mapped_library("_polars_runtime") or _mapped_library("polars")
    if mapped is None:
        return None
    path, base, inode = mapped
    try:
        if os.stat(path).st_ino != inode:
            return None
    except OSError:
        return None
    found = _function_offset(path, _MALLCTL)
    if found is None:
        return None
    mallctl = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p,
                               ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p,
                               ctypes.c_size_t)(base + found[0])
    version, size = ctypes.c_char_p(), ctypes.c_size_t(ctypes.sizeof(ctypes.c_char_p))
    if (mallctl(b"version", ctypes.byref(version), ctypes.byref(size), None, 0) != 0
            or not (version.value or b"")[:1].isdigit()):
        return None
    return mallctl


# Below this many rows a stage frees a few MB, and a trim (a walk of the heap, ~1-4 ms, and
# the page faults of reusing what it gave back) would cost a small trace's latency for nothing.
LARGE_ROWS = 1_000_000


def release_freed_memory(rows: int, polars: bool = True) -> None:
    """After a stage over ``rows`` rows: return the free pages of the C library's heap, of
    polars' jemalloc (``polars``) and of pyarrow's pool (once pyarrow is loaded: the capture
    writer's row groups) to the system (see the module doc) when ``rows`` is at least
    ``LARGE_ROWS``; each part a no-op where it is not available. ``polars`` False: polars'
    freed pages are left to it (its next stage reuses them; purged, they fault in again:
    ~0.1-0.3 s of a 4.6 s analysis of 6.6 M events built in memory, for ~50 MB at its
    peak)."""
    if rows < LARGE_ROWS:
        return
    if (trim := _trim()) is not None:
        trim(0)
    if polars and (purge := _polars_purge()) is not None:
        purge()
    if "pyarrow" in sys.modules:  # its own pool (mimalloc or jemalloc), where it was used
        sys.modules["pyarrow"].default_memory_pool().release_unused()


def available_bytes() -> int | None:
    """The memory available to start new work without swapping (``MemAvailable`` of
    ``/proc/meminfo``), in bytes; None where the system does not say (not Linux)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def resident_mb() -> tuple[int, int] | None:
    """This process's resident memory now and its high-water mark (``VmRSS``, ``VmHWM``), in
    MB; None where ``/proc/self/status`` does not say (not Linux)."""
    got = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    got[line[:5]] = int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return (got["VmRSS"], got["VmHWM"]) if len(got) == 2 else None


def reset_peak() -> bool:
    """Start a new high-water mark at the resident memory now (``/proc/self/clear_refs``,
    Linux 4.0+); False where that is not possible (then ``VmHWM`` keeps the process's)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
