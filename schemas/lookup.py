"""Row lookup by integer key: the join that capture producers and the analysis use most.

Producers number their ids densely (Kineto's Python ids, CUPTI's correlation ids, zym's own
node ids), so a key usually indexes an array: one scatter and one gather, no hash table,
which on a trace's hundreds of thousands of rows is both faster and lighter than a join.
Keys that are not compact take a hash join, with the same result. And the other side of
many rows with few values: a text column's distinct values (``distinct_text``), which the
checks and classifications test once each, not row by row.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl


def first_row_of(keys: pl.Series, queries: pl.Series) -> pl.Series:
    """For each query, the first row of ``keys`` that holds the same value, or null (Int64).

    >>> first_row_of(pl.Series([5, 3, 5]), pl.Series([5, 4, None, 3])).to_list()
    [0, None, None, 1]
    """
    n = keys.len()
    ends = [v for v in (keys.min(), keys.max(), queries.min(), queries.max()) if v is not None]
    if not ends:  # no key or no query holds a value
        return pl.repeat(None, queries.len(), dtype=pl.Int64, eager=True)
    lo, hi = min(ends), max(ends)
    if lo >= _INT64[0] and hi <= _INT64[1]:
        k, rows = _values(keys)
        q = queries.cast(pl.Int64)
        missing = q.is_null().to_numpy() if q.null_count() else None
        q = (q.fill_null(lo) if missing is not None else q).to_numpy()
        found = _first_rows(k, rows, q, lo, hi, n)
        if missing is not None:
            found[missing] = -1
        return null_where_negative(found, queries.name)
    found = (pl.DataFrame({"key": keys}).with_row_index("row").drop_nulls("key")
             .unique("key", keep="first", maintain_order=True))
    return (pl.DataFrame({"key": queries})
            .join(found, on="key", how="left", maintain_order="left")["row"].cast(pl.Int64))


_INT64 = (-(1 << 63), (1 << 63) - 1)


def first_rows(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """:func:`first_row_of` for int64 arrays without nulls, in numpy: -1 where none.

    >>> first_rows(np.array([5, 3, 5]), np.array([5, 4, 3])).tolist()
    [0, -1, 1]
    """
    k, q = np.asarray(keys, np.int64), np.asarray(queries, np.int64)
    if not len(k) or not len(q):
        return np.full(len(q), -1, np.int64)
    lo, hi = int(min(k.min(), q.min())), int(max(k.max(), q.max()))
    return _first_rows(k, None, q, lo, hi, len(k))


def _first_rows(k: np.ndarray, rows: np.ndarray | None, q: np.ndarray, lo: int, hi: int,
                n: int) -> np.ndarray:
    """Each query's first row among the keys ``k`` (at ``rows``; None: every row), keys and
    queries in ``[lo, hi]``, ``n`` keys in all: by an array where the range is a few times the
    keys and queries, else by a search. -1: none."""
    dense = 4 * (n + len(q)) + 1024
    if hi - lo < dense:  # (ids from 0 index the array as they are)
        return _first_row_dense(k, rows, q, 0 if lo >= 0 and hi < dense else lo, hi)
    return _first_row_sorted(k, rows, q)


def _values(keys: pl.Series) -> tuple[np.ndarray, np.ndarray | None]:
    """The keys that hold a value (int64) and their rows (None: every row, in order)."""
    if not keys.null_count():
        return keys.cast(pl.Int64).to_numpy(), None
    ok = keys.is_not_null().to_numpy()
    return keys.drop_nulls().cast(pl.Int64).to_numpy(), np.flatnonzero(ok)


def _first_row_dense(k: np.ndarray, rows: np.ndarray | None, q: np.ndarray, lo: int,
                     hi: int) -> np.ndarray:
    """``first_row_of`` for keys and queries in ``[lo, hi]``, a range few times the rows (ids
    numbered densely, from any start: a long run's trace starts at a high correlation id):
    one array indexed by ``key - lo``, a scatter and a gather (0.1 against 0.3 s for polars'
    at 12.5 M keys and 10 M queries). -1: none."""
    return row_table(k, rows, lo, hi)[q - lo if lo else q]


def row_table(k: np.ndarray, rows: np.ndarray | None, lo: int, hi: int) -> np.ndarray:
    """Each key's first row (at ``rows``; None: every row, in order), indexed by ``key - lo``
    for keys in ``[lo, hi]``; -1 for values no key holds."""
    table = np.full(hi - lo + 1, -1, np.int64)
    at = np.arange(len(k), dtype=np.int64) if rows is None else rows
    table[(k - lo if lo else k)[::-1]] = at[::-1]  # reversed: a key's first row written last
    return table


def _first_row_sorted(k: np.ndarray, rows: np.ndarray | None, q: np.ndarray) -> np.ndarray:
    """``first_row_of`` for keys spread too far for an array: each query searched among the
    keys sorted (stably: a key's first row comes first among its equals). Keys in order
    already (correlation ids in time order) sort in one pass. At the bundled trace x600
    (7.2 M keys over 116 M ids, 5.7 M queries) 0.6 s, against 2.2 s for a hash join. -1:
    none."""
    if not len(k):
        return np.full(len(q), -1, np.int64)
    order = np.argsort(k, kind="stable")
    ordered = k[order]
    pos = np.minimum(np.searchsorted(ordered, q), len(k) - 1)
    first = order[pos] if rows is None else rows[order[pos]]
    return np.where(ordered[pos] == q, first, -1)


def null_where_negative(rows: np.ndarray, name: str = "") -> pl.Series:
    """Positions from numpy (-1: none) as a polars column, null where none."""
    found = pl.Series(name, rows)
    if not (found < 0).any():
        return found
    return found.to_frame().select(pl.when(pl.col(name) >= 0).then(pl.col(name))).to_series()


def per_distinct(column: pl.Series, compute: Callable[[pl.Series], pl.Series]) -> pl.Series:
    """``compute`` (one value for each of the text values it is given) run once on the
    distinct values of ``column`` (text, or categorical codes of it) and spread to its rows
    (null where null): the values are few, the rows millions. Codes are looked up by an
    array, not joined (at 10-12.5 M rows ~0.1 against ~0.2-0.5 s)."""
    distinct = column.unique(maintain_order=column.dtype == pl.Categorical).drop_nulls()
    got = compute(distinct.cast(pl.String))
    if column.dtype == pl.Categorical:
        codes = column.to_physical()
        fast = _by_code(distinct.to_physical(), got, codes)
        return fast if fast is not None else got.gather(first_row_of(distinct.to_physical(),
                                                                     codes))
    return (pl.DataFrame({"v": column}).join(pl.DataFrame({"v": distinct, "got": got}), on="v",
                                              how="left", maintain_order="left")["got"])


# Categorical codes up to this value are read through a table indexed by code (numpy): one
# gather of the rows' codes (~0.03 s at 12.5 M rows, against ~0.15 s by first rows).
CODE_TABLE_MAX = 1 << 22


def _by_code(codes: pl.Series, values: pl.Series, rows: pl.Series) -> pl.Series | None:
    """``values`` (one per distinct code of ``codes``; numbers or booleans, no nulls) at each
    of ``rows`` (codes; null where null), through a table indexed by code; None where that
    does not apply (other values, or codes past ``CODE_TABLE_MAX``)."""
    if not len(codes) or values.null_count() or not (values.dtype.is_numeric()
                                                      or values.dtype == pl.Boolean):
        return None
    top = int(codes.max())
    if top > CODE_TABLE_MAX or rows.max() is None or int(rows.max()) > top:
        return None
    v = values.to_numpy()
    table = np.zeros(top + 1, v.dtype)
    table[codes.to_numpy()] = v
    missing = rows.null_count()
    out = pl.Series(values.name, table[(rows.fill_null(0) if missing else rows).to_numpy()],
                    values.dtype)
    return out.set(rows.is_null(), None) if missing else out


def distinct_text(column: pl.Series) -> pl.Series:
    """The distinct values of a text column (text, or categorical codes of it), as text,
    without nulls: what a test of the text runs over once per value.

    >>> sorted(distinct_text(pl.Series(["a", None, "b", "a"]).cast(pl.Categorical)))
    ['a', 'b']
    """
    n_null = column.null_count()  # (known without a pass)
    if n_null == column.len():
        return pl.Series(column.name, [], pl.String)
    values = column.drop_nulls() if n_null else column
    # categorical codes: first seen order, polars' faster path for them (~40 against ~85 ms
    # at 10 M rows); text: the default (keeping the order is the slower there)
    return values.unique(maintain_order=values.dtype == pl.Categorical).cast(pl.String)
