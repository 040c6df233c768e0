"""Giving freed memory back between the stages of a large load."""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import pytest
from zym.schemas import memory


def test_trims_only_after_large_stages(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "_trim", lambda: calls.append)
    memory.release_freed_memory(memory.LARGE_ROWS - 1)
    assert calls == []
    memory.release_freed_memory(memory.LARGE_ROWS)
    assert calls == [0]


def test_the_c_library_call_runs_where_there_is_one():
    memory.release_freed_memory(memory.LARGE_ROWS)  # glibc here: malloc_trim; else a no-op


def _rss_mb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))


def _polars_library():
    import polars  # noqa: F401

    mapped = memory._mapped_library("_polars_runtime") or memory._mapped_library("polars")
    assert mapped is not None, "polars' native library is not mapped in this process"
    return mapped


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and ELF files")
def test_symbol_offsets_agree_with_the_dynamic_linker():
    """A function the library also exports: its symbol-table offset plus the load address is
    the address the dynamic linker gives (a second method than the ELF reading)."""
    path, base, _ = _polars_library()
    exported = "PyInit_" + os.path.basename(path).split(".")[0]
    found = memory.elf_function_offset(path, exported.encode())
    assert found is not None and found[1] > 0
    linked = ctypes.cast(getattr(ctypes.CDLL(path), exported), ctypes.c_void_p).value
    assert base + found[0] == linked


def test_no_offset_from_a_file_that_is_not_an_elf_library(tmp_path):
    junk = tmp_path / "lib.so"
    junk.write_bytes(b"\x7fELF" + bytes(200))
    assert memory.elf_function_offset(str(junk), b"_rjem_mallctl") is None
    junk.write_bytes(b"not a library at all")
    assert memory.elf_function_offset(str(junk), b"_rjem_mallctl") is None
    assert memory.elf_function_offset(str(tmp_path / "missing.so"), b"x") is None


def _set_decay(mallctl, dirty_ms: int, muzzy_ms: int) -> None:
    """jemalloc's decay times (dirty and muzzy pages) in every arena and for new ones; -1:
    freed pages are kept until purged."""
    count, size = ctypes.c_uint(0), ctypes.c_size_t(4)
    assert mallctl(b"arenas.narenas", ctypes.byref(count), ctypes.byref(size), None, 0) == 0
    for name, ms in ((b"dirty_decay_ms", dirty_ms), (b"muzzy_decay_ms", muzzy_ms)):
        value = ctypes.c_ssize_t(ms)
        assert mallctl(b"arenas." + name, None, None, ctypes.byref(value), 8) == 0
        for i in range(count.value):  # arenas not yet in use refuse: nothing of theirs to keep
            mallctl(f"arena.{i}.".encode() + name, None, None, ctypes.byref(value), 8)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="polars' jemalloc, Linux build")
def test_polars_freed_columns_are_given_back():
    """~400 MB of polars columns in 4 MB pieces dropped: with jemalloc's decay turned off for
    the test (polars' own gives pages back after 0.5-1.5 s, on its clock), the pages are still
    held a second later; the purge gives them back at once."""
    import time

    import numpy as np
    import polars as pl

    memory._polars_purge.cache_clear()
    memory.polars_mallctl.cache_clear()
    mallctl = memory.polars_mallctl()
    assert mallctl is not None, "polars' jemalloc mallctl was not found (stripped build?)"
    purge = memory._polars_purge()
    _set_decay(mallctl, -1, -1)
    try:
        purge()
        before = _rss_mb()
        columns = [pl.Series(np.arange(i, i + 500_000)) + 1 for i in range(100)]
        assert _rss_mb() - before > 300
        del columns
        time.sleep(1.0)
        held = _rss_mb()
        assert held - before > 300  # kept: nothing gave them back yet
        assert purge() == 0
        assert held - _rss_mb() >= 250
    finally:
        _set_decay(mallctl, 500, 1000)  # polars' own settings


def test_release_purges_polars_only_after_large_stages(monkeypatch):
    purged = []
    monkeypatch.setattr(memory, "_trim", lambda: None)
    monkeypatch.setattr(memory, "_polars_purge", lambda: lambda: purged.append(1))
    memory.release_freed_memory(memory.LARGE_ROWS - 1)
    assert purged == []
    memory.release_freed_memory(memory.LARGE_ROWS)
    assert purged == [1]
    trimmed = []
    monkeypatch.setattr(memory, "_trim", lambda: trimmed.append)
    memory.release_freed_memory(memory.LARGE_ROWS, polars=False)  # the C library's alone
    assert purged == [1] and trimmed == [0]


def test_an_analysis_in_no_given_budget_leaves_polars_its_freed_pages(monkeypatch):
    """A trace's tables built in memory for an analysis with no budget given do not purge
    polars' allocator between their stages; with a budget given (its in-memory share was
    measured with purges), for `zym import`, and window by window, they do; the C library's
    freed pages are given back every time; the tables are the same."""
    from zym.capture import kineto, kineto_stream

    calls = []
    monkeypatch.setattr(memory, "LARGE_ROWS", 1)
    monkeypatch.setattr(kineto, "free_memory",
                        lambda rows, polars=True: calls.append(polars))
    trace = Path(__file__).parents[2] / "sample_traces" / "gpt_decode_server.trace.json.gz"
    default = kineto_stream.load_or_import(trace)[0]
    assert calls and not any(calls)
    calls.clear()
    given = kineto_stream.load_or_import(trace, None, None, 1 << 30)[0]
    assert calls and all(calls)
    calls.clear()
    imported = kineto.load_kineto(trace)[0]
    assert calls and all(calls)
    assert all(default[t].equals(given[t]) and default[t].equals(imported[t]) for t in default)
    del default, given, imported
    memory.release_freed_memory(memory.LARGE_ROWS)  # (not left to the tests after this one)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and ELF files")
def test_the_offset_is_kept_for_this_very_file(tmp_path, monkeypatch):
    """Read once from the symbol table, then from the cache while the file is the same; an
    entry of the wrong shape is not used."""
    from zym.schemas import jsoncache

    monkeypatch.setenv(jsoncache.ENV_DIR, str(tmp_path))
    monkeypatch.delenv(jsoncache.ENV_SWITCH, raising=False)
    path = _polars_library()[0]
    want = memory.elf_function_offset(path, b"_rjem_mallctl")
    assert want is not None
    assert memory._function_offset(path, b"_rjem_mallctl") == want
    entries = list((tmp_path / memory._CACHE_KIND).glob("*.json"))
    assert len(entries) == 1

    def no_read(*_):
        raise AssertionError("the symbol table was read again")

    monkeypatch.setattr(memory, "elf_function_offset", no_read)
    assert memory._function_offset(path, b"_rjem_mallctl") == want
    key = entries[0].stem
    jsoncache.write(memory._CACHE_KIND, key, jsoncache.dumps(["x", -1]))
    monkeypatch.setattr(memory, "elf_function_offset", lambda *_: (1, 2))
    assert memory._function_offset(path, b"_rjem_mallctl") == (1, 2)


def test_pyarrows_pool_gives_its_freed_pages_back(monkeypatch):
    """pyarrow keeps what its pool frees (mimalloc or jemalloc); the capture writer's row groups
    are allocated there. ~300 MB of its buffers freed: the release gives them back (RSS falls by
    more than 200 MB), which the C library's and polars' parts alone do not."""
    import pyarrow as pa
    if memory.resident_mb() is None:
        pytest.skip("no /proc/self/status")
    memory.release_freed_memory(memory.LARGE_ROWS)  # (what earlier tests freed: not counted)
    buffers = [pa.allocate_buffer(1 << 20) for _ in range(300)]
    del buffers
    before = memory.resident_mb()[0]
    with monkeypatch.context() as m:
        m.delitem(sys.modules, "pyarrow")
        memory.release_freed_memory(memory.LARGE_ROWS)
    without = memory.resident_mb()[0]
    memory.release_freed_memory(memory.LARGE_ROWS)
    after = memory.resident_mb()[0]
    assert before - after > 200 and before - without < 100, (before, without, after)
