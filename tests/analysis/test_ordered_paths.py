"""Paths taken where times are sorted or ids are few, against the general ones: each thread's
calls in time order by radix on 16-bit keys (``instances.thread_order``) against numpy's
stable sort of the ids themselves; a sample's rows found by searching the sorted times for
its ranges' bounds (``sample._in_ranges``) against a search per row (``interval_of``)."""
from __future__ import annotations

import numpy as np
import pytest
from zym.analysis import instances, sample
from zym.analysis.timeline import interval_of


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("spread", ["one process", "several processes", "tids far apart"])
def test_thread_order_is_the_stable_sort_of_the_ids(seed, spread):
    rng = np.random.default_rng(seed)
    if spread == "one process":
        pool = (7 << 32) + rng.integers(1000, 1040, 5)
    elif spread == "several processes":  # the pid in the high bits: ids 2^32 apart
        pool = (rng.integers(100, 4_000_000, 6) << 32) + rng.integers(1, 4_000_000, 6)
    else:
        pool = (9 << 32) + np.array([3, 70_000, 4_000_000])
    ids = rng.choice(pool, int(rng.integers(1, 5_000)))
    expected = np.argsort(ids, kind="stable")
    key = instances._small_key(ids)
    assert key.dtype == np.uint16
    assert np.array_equal(instances.thread_order(ids), expected)


def test_thread_order_of_more_ids_than_16_bits_hold():
    rng = np.random.default_rng(1)
    ids = rng.permutation(np.arange(70_000, dtype=np.int64) * 100_003)
    ids = np.concatenate([ids, ids[:5_000]])
    assert instances._small_key(ids).dtype == np.int64
    assert np.array_equal(instances.thread_order(ids), np.argsort(ids, kind="stable"))


@pytest.mark.parametrize("seed", range(8))
def test_ranges_of_sorted_times_are_those_a_search_per_row_finds(seed):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 200, int(rng.integers(0, 400))))  # repeats, range edges
    edges = np.sort(rng.choice(np.arange(-10, 215), 2 * int(rng.integers(1, 6)),
                               replace=False))
    ranges = tuple((int(a), int(b)) for a, b in edges.reshape(-1, 2))
    bounds = np.array(ranges).reshape(-1, 2)
    expected = interval_of(ts, bounds[:, 0], bounds[:, 1]) >= 0
    assert np.array_equal(sample._in_ranges(ts, ranges, ordered=True), expected)
    assert np.array_equal(sample._in_ranges(ts, ranges), expected)
