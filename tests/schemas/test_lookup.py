"""Row lookup by key: the array path (compact ids) and the join path (others) agree."""
from __future__ import annotations

import random

import polars as pl
import pytest
from zym.schemas.lookup import distinct_text, first_row_of, per_distinct


def _reference(keys: list, queries: list) -> list:
    first: dict = {}
    for row, key in enumerate(keys):
        if key is not None:
            first.setdefault(key, row)
    return [first.get(q) for q in queries]


@pytest.mark.parametrize("nulls", [0.1, 0.0])  # with nulls; none
# compact ids from 0 or from far up (an array from the lowest); spread far apart, either sign
# (a search among the sorted keys)
@pytest.mark.parametrize("scale,base", [(1, 0), (1, 10**12), (10**12, 0), (-(10**12), 0)])
@pytest.mark.parametrize("seed", range(3))
def test_first_row_of_matches_a_dict(scale, base, seed, nulls):
    rng = random.Random(seed)
    keys = [None if rng.random() < nulls else base + rng.randrange(50) * scale
            for _ in range(200)]
    queries = [None if rng.random() < nulls else base + rng.randrange(60) * scale
               for _ in range(300)]
    qtype = pl.UInt64 if scale > 0 else pl.Int64
    got = first_row_of(pl.Series(keys, dtype=pl.Int64), pl.Series(queries, dtype=qtype))
    assert got.dtype == pl.Int64 and got.to_list() == _reference(keys, queries)


def test_first_row_of_keys_beyond_int64():
    """Unsigned keys past int64's range (a hash join)."""
    big = 1 << 63
    keys = [big + 5, 3, big + 5, None, big]
    queries = [big, None, 3, big + 5, 7]
    got = first_row_of(pl.Series(keys, dtype=pl.UInt64), pl.Series(queries, dtype=pl.UInt64))
    assert got.dtype == pl.Int64 and got.to_list() == _reference(keys, queries)


@pytest.mark.parametrize("ordered", [True, False])
def test_first_row_of_many_sparse_keys(ordered):
    """Keys far apart, in order (correlation ids in time order) or not, with repeats."""
    rng = random.Random(11)
    keys = sorted(rng.randrange(10**9) for _ in range(3000)) if ordered else [
        rng.randrange(10**9) for _ in range(3000)]
    keys += keys[:50]
    queries = [rng.choice(keys) if rng.random() < 0.7 else rng.randrange(10**9)
               for _ in range(4000)]
    got = first_row_of(pl.Series(keys, dtype=pl.Int64), pl.Series(queries, dtype=pl.Int64))
    assert got.to_list() == _reference(keys, queries)


def test_first_row_of_with_nothing_to_find():
    assert first_row_of(pl.Series([], dtype=pl.Int64), pl.Series([None, None])).to_list() == [
        None, None]
    assert first_row_of(pl.Series([None], dtype=pl.Int64), pl.Series([], dtype=pl.Int64)).len() == 0


@pytest.mark.parametrize("dtype", [pl.String, pl.Categorical])
@pytest.mark.parametrize("nulls", [0.0, 0.7, 1.0])  # none, most (a copy's columns), every row
def test_distinct_text_is_the_set_of_values(dtype, nulls):
    rng = random.Random(7)
    values = [None if rng.random() < nulls else f"k{rng.randrange(40)}" for _ in range(5000)]
    got = distinct_text(pl.Series("c", values, dtype=dtype))
    assert got.dtype == pl.String and got.null_count() == 0 and got.is_unique().all()
    assert set(got.to_list()) == {v for v in values if v is not None}
    assert distinct_text(pl.Series("c", [], dtype=dtype)).to_list() == []


@pytest.mark.parametrize("table", [True, False])
@pytest.mark.parametrize("nulls", [0.2, 0.0])
@pytest.mark.parametrize("dtype", [pl.String, pl.Categorical])
def test_per_distinct_is_the_value_of_each_rows_text(dtype, nulls, table, monkeypatch):
    """Computed once per distinct value, spread to the rows: what computing each row's own
    value gives (null where the row is null), for numbers, booleans and text; categorical
    codes read through a table by code, and past its size by first rows."""
    from zym.schemas import lookup

    if not table:
        monkeypatch.setattr(lookup, "CODE_TABLE_MAX", -1)
    rng = random.Random(3)
    values = [None if rng.random() < nulls else f"cuda{rng.randrange(30)}" for _ in range(4000)]
    calls = []

    def length(text: pl.Series) -> pl.Series:
        calls.append(text.len())
        return text.str.len_chars() * 10

    got = per_distinct(pl.Series("c", values, dtype=dtype), length)
    assert got.to_list() == [None if v is None else len(v) * 10 for v in values]
    assert calls == [len({v for v in values if v is not None})]  # once per distinct value
    ends = per_distinct(pl.Series("c", values, dtype=dtype), lambda t: t.str.ends_with("7"))
    assert ends.to_list() == [None if v is None else v.endswith("7") for v in values]
    upper = per_distinct(pl.Series("c", values, dtype=dtype), lambda t: t.str.to_uppercase())
    assert upper.to_list() == [None if v is None else v.upper() for v in values]
