"""The compiled loops' one way to numba (``analysis.compiled.njit``): the loops compiled, in
order, giving what they give interpreted; None where numba cannot be imported."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from zym.analysis.compiled import njit


def _running_total(x, out) -> None:
    total = 0
    for i in range(len(x)):
        total += x[i]
        out[i] = total


def _doubled(x, out) -> None:
    for i in range(len(x)):
        out[i] = 2 * x[i]


def test_loops_compiled_in_order_give_what_they_give_interpreted():
    pytest.importorskip("numba", reason="numba not installed (a zym dependency: pip install -e .)")
    compiled = njit(_running_total, _doubled)
    assert compiled is not None and len(compiled) == 2
    x = np.arange(1, 8, dtype=np.int64)
    for loop, fast in zip((_running_total, _doubled), compiled, strict=True):
        want, got = np.zeros(7, np.int64), np.zeros(7, np.int64)
        loop(x, want)
        fast(x, got)
        assert np.array_equal(got, want)
        # compiled: numba's, for these arrays (checked: the loops themselves passed the rest)
        assert getattr(fast, "py_func", None) is loop and len(getattr(fast, "signatures", ())) == 1
    assert np.array_equal(want, 2 * x)


def test_none_without_numba(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)  # ``import numba`` raises ImportError
    assert njit(_running_total) is None


def test_compiled_where_no_cache_can_be_written(monkeypatch):
    """Where numba finds no writable cache folder (a read-only install and home) it refuses
    ``cache=True`` with a RuntimeError at compile time; the loops are then compiled for this
    process alone, with the same results (before: the error ended the analysis)."""
    pytest.importorskip("numba", reason="numba not installed (a zym dependency: pip install -e .)")
    from numba.core import caching

    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])
    import numba

    with pytest.raises(RuntimeError, match="no locator"):  # what numba does there
        numba.njit(cache=True)(_doubled)
    compiled = njit(_running_total, _doubled)
    assert compiled is not None
    x = np.arange(1, 8, dtype=np.int64)
    got = np.zeros(7, np.int64)
    compiled[1](x, got)
    assert np.array_equal(got, 2 * x)
    assert compiled[0]._cache.__class__.__name__ == "NullCache"  # compiled, not cached


def _plus_one(x):
    return x + 1


def _uses_helper(x, out, helper) -> None:
    for i in range(len(x)):
        out[i] = helper(x[i])


def test_inline_helpers_compile_and_are_called_from_compiled_loops():
    pytest.importorskip("numba", reason="numba not installed (a zym dependency: pip install -e .)")
    (helper,) = njit(_plus_one, inline=True)
    assert helper.targetoptions.get("inline") == "always"
    (loop,) = njit(_uses_helper)
    x, got = np.arange(5, dtype=np.int64), np.zeros(5, np.int64)
    loop(x, got, helper)
    assert np.array_equal(got, x + 1)


def test_another_numba_failure_is_not_hidden(monkeypatch):
    """Only numba's "cannot cache" refusal is compiled around: another error at compile
    time is raised as it is, not turned into an uncached compile."""
    numba = pytest.importorskip("numba",
                                reason="numba not installed (a zym dependency: pip install -e .)")

    def failing(**options):
        def decorate(loop):
            raise RuntimeError("something else")
        return decorate

    monkeypatch.setattr(numba, "njit", failing)
    with pytest.raises(RuntimeError, match="something else"):
        njit(_doubled)
