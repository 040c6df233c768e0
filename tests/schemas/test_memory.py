"""Giving freed memory back between the stages of a large load."""
from __future__ import annotations

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
