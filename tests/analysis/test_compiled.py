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
    assert np.array_equal(want, 2 * x)


def test_none_without_numba(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)  # ``import numba`` raises ImportError
    assert njit(_running_total) is None
