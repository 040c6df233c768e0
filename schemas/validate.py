"""Every field of a capture's tables checked at the boundary, before any analysis runs.

A capture file is read by polars and a Kineto trace decoded by msgspec; either can hold values
that are well-typed but impossible (negative durations, times past the int64 range once an end
is computed, depths that do not follow the parent links, stack ids nobody defines) or simply
hostile (a 100 MB name, a 50,000-deep stack, shapes nested 100,000 levels). Such values used
to surface as a polars or Python exception (a traceback), a hang, or a wrong answer. Here they
become one ``InvalidCaptureError`` (an ``InputError``: one line, exit code 2) naming the
table, the column and how many rows, or a documented truncation:

* names, files (``name``, ``file``) longer than ``MAX_NAME_CHARS`` are cut to that length with
  a trailing ``…`` (C++ template kernel names run to a few kB; nothing real reaches the limit);
* ``op_shapes``/``op_dtypes`` longer than ``MAX_SHAPES_CHARS`` or nested deeper than
  ``MAX_SHAPES_NESTING`` are dropped (null): shapes are a hint for rules, not a fact zym needs.

Errors: a value out of its column's range (``RANGES``), a kind outside its vocabulary, a
duplicate ``frame_id``/``stack_id``, a ``parent_id`` or ``frame_id`` that no row defines, a
``depth`` other than its parent's plus one (which also rules out cyclic parent links), a
stack deeper than ``MAX_STACK_DEPTH`` frames, and a call, span or range whose ``stack_id`` is not in
the stack table. All checks are vectorised polars expressions over whole columns.
"""
from __future__ import annotations

import polars as pl

from .errors import InputError
from .lookup import distinct_text
from .tables import CALL_KINDS, CLIPPED, COPY_KINDS, FRAME_KINDS, GPU_KINDS, RANGE_KINDS, REQUIRED

MAX_STACK_DEPTH = 2048  # frames from the root; Python's default recursion limit is 1000
MAX_NAME_CHARS = 16_384
MAX_SHAPES_CHARS = 65_536
MAX_SHAPES_NESTING = 8
I64 = (1 << 63) - 1
I32 = (1 << 31) - 1

# Inclusive ranges; null passes (REQUIRED columns are checked by ``conform``).
RANGES: dict[str, tuple[int, int]] = {
    "pid": (-I32 - 1, I64), "tid": (-I64, I64), "ts_ns": (0, I64), "dur_ns": (0, I64),
    "size_bytes": (0, I64), "depth": (0, MAX_STACK_DEPTH - 1), "line": (0, I32),
    "device_id": (-1, 1 << 16), "frame_id": (0, I64), "stack_id": (0, I64),
    "parent_id": (0, I64), "correlation_id": (-I64, I64), "stream_id": (-I64, I64),
    **{f"{d}_{a}": (0, I32) for d in ("grid", "block") for a in "xyz"},
}
VOCABULARY: dict[str, dict[str, tuple[str, ...]]] = {
    "frame": {"kind": FRAME_KINDS},
    "call": {"kind": CALL_KINDS, "copy_kind": COPY_KINDS},
    "gpu": {"kind": GPU_KINDS, "copy_kind": COPY_KINDS},
    "range": {"kind": RANGE_KINDS, "clipped": CLIPPED},
}


class InvalidCaptureError(InputError):
    """A capture whose values are out of range or inconsistent: the message names the table,
    the column and how many rows."""


def _fail(source: str, table: str, what: str) -> InvalidCaptureError:
    return InvalidCaptureError(f"{source}: {table} table: {what}: not a capture zym can trust")


def check_table(table: str, df: pl.DataFrame, source: str = "capture") -> pl.DataFrame:
    """One table's own checks (ranges, vocabularies, keys, time ends); returns the table with
    the documented truncations applied."""
    nulls = [c for c in REQUIRED.get(table, ()) if c in df.columns and df[c].null_count()]
    if nulls:
        raise _fail(source, table, f"null values in required column(s) {nulls}")
    # Each integer column's smallest and largest value first (one reduction a column, no
    # mask); its rows are counted only where those leave its range.
    ranged = [c for c in RANGES if c in df.columns]
    ints = [c for c in ranged if df[c].dtype.is_integer()]
    ext = df.select([f(c).alias(f"{c}.{f.__name__}") for c in ints
                     for f in (pl.min, pl.max)]).row(0, named=True) if ints else {}
    checks = [(c, pl.col(c).is_between(*RANGES[c])) for c in ranged
              if c not in ints or _outside(ext[f"{c}.min"], ext[f"{c}.max"], *RANGES[c])]
    # The end must fit in int64 too: no row's can pass it where the largest start plus the
    # largest duration does not; else exactly, row by row (``I64 - dur_ns`` cannot overflow
    # where the duration is not negative).
    if {"ts_ns", "dur_ns"} <= set(ints) and ext["ts_ns.max"] is not None and \
            ext["dur_ns.max"] is not None and ext["ts_ns.max"] + ext["dur_ns.max"] >= I64:
        checks.append(("ts_ns + dur_ns", pl.when(pl.col("dur_ns") >= 0)
                       .then(pl.col("ts_ns") <= I64 - pl.col("dur_ns"))))
    for col, allowed in VOCABULARY.get(table, {}).items():
        # the distinct values first (a few, on millions of rows): the rows only where one is bad
        if col in df.columns and not distinct_text(df[col]).is_in(
                list(allowed)).all():
            checks.append((col, pl.col(col).cast(pl.String).is_in(list(allowed))))
    if checks:
        bad = df.select([(~e).fill_null(False).sum().alias(c) for c, e in checks]).row(0)
        for (col, _), n in zip(checks, bad):
            if n:
                first = df.filter((~dict(checks)[col]).fill_null(False)).select(
                    pl.col(col.split(" ")[0]).cast(pl.String).str.slice(0, 40))[0, 0]
                raise _fail(source, table, f"{n} row(s) with {col} out of range "
                                           f"(first: {first!r})")
    key = {"frame": "frame_id", "stack": "stack_id"}.get(table)
    if key and df[key].is_duplicated().any():
        raise _fail(source, table, f"duplicate {key} values")
    return _truncate(df)


def _outside(lo: int | None, hi: int | None, low: int, high: int) -> bool:
    """Whether a column whose values run from ``lo`` to ``hi`` (None: all null) has one
    outside ``[low, high]``."""
    return lo is not None and (lo < low or hi > high)


def _truncate(df: pl.DataFrame) -> pl.DataFrame:
    # A column is rewritten only where some value is too long (bytes >= characters: no text
    # of at most MAX_NAME_CHARS bytes needs the character count), not copied row by row.
    cut = [_cut_long(c, df[c].dtype) for c in ("name", "file")
           if c in df.columns and _has_long(df[c])]
    for c in ("op_shapes", "op_dtypes"):
        if c in df.columns:  # a few thousand distinct values on millions of rows: check those
            # (text, or categorical codes of it: an importer's in-memory spans)
            values = distinct_text(df[c])
            bad = values.filter(~pl.select(_shapes_ok(pl.lit(values))).to_series())
            if bad.len():
                cut.append(pl.when(~pl.col(c).is_in(bad.cast(df[c].dtype).implode()))
                           .then(pl.col(c)).alias(c))
    return df.with_columns(cut) if cut else df


def _has_long(col: pl.Series) -> bool:
    """Whether some value of ``col`` (text, or categorical codes of it: names read as codes,
    whose distinct values are checked) has more than ``MAX_NAME_CHARS`` bytes."""
    if col.dtype == pl.Categorical:
        col = distinct_text(col)
    elif col.dtype != pl.String:
        return False
    return bool((col.str.len_bytes() > MAX_NAME_CHARS).any())


def _cut_long(name: str, dtype: pl.DataType) -> pl.Expr:
    """Column ``name`` cut to ``MAX_NAME_CHARS`` characters (the last one an ellipsis) where
    longer, as its text; of type ``dtype`` (codes stay codes)."""
    text = pl.col(name).cast(pl.String)
    return (pl.when(text.str.len_chars() > MAX_NAME_CHARS)
            .then(text.str.slice(0, MAX_NAME_CHARS - 1) + "…").otherwise(text)
            .cast(dtype).alias(name))


def _shapes_ok(col: pl.Expr) -> pl.Expr:
    """Short enough, and nested at most MAX_SHAPES_NESTING deep: the bracket skeleton empties
    after removing innermost pairs that many times."""
    skeleton = col.str.replace_all(r"[^\[\]{}]", "")
    for _ in range(MAX_SHAPES_NESTING):
        skeleton = skeleton.str.replace_all(r"\[\]|\{\}", "")
    return (col.str.len_bytes() <= MAX_SHAPES_CHARS) & (skeleton.str.len_bytes() == 0)


def check_stacks(stacks: pl.DataFrame, frame_ids: pl.Series, source: str = "capture") -> None:
    """Parent links resolve, depths follow them (no cycles), frames exist."""
    parents = stacks.select("stack_id", pl.col("depth").alias("parent_depth"))
    linked = stacks.join(parents, left_on="parent_id", right_on="stack_id", how="left")
    dangling = linked.filter(pl.col("parent_id").is_not_null() & pl.col("parent_depth").is_null())
    if dangling.height:
        raise _fail(source, "stack", f"{dangling.height} row(s) whose parent_id is no stack_id "
                                     f"(first: {dangling['parent_id'][0]})")
    expected = pl.when(pl.col("parent_id").is_null()).then(0).otherwise(pl.col("parent_depth") + 1)
    wrong = linked.filter(pl.col("depth") != expected)
    if wrong.height:
        raise _fail(source, "stack", f"{wrong.height} row(s) whose depth is not their parent's "
                                     "plus one (cyclic or damaged parent links)")
    unknown = stacks.filter(~pl.col("frame_id").is_in(frame_ids.implode()))
    if unknown.height:
        raise _fail(source, "stack", f"{unknown.height} row(s) whose frame_id is no frame "
                                     f"(first: {unknown['frame_id'][0]})")


def check_refs(table: str, df: pl.DataFrame, stack_ids: pl.Series,
               source: str = "capture") -> None:
    """Every non-null ``stack_id`` of a call, span or range names a stack node."""
    if "stack_id" not in df.columns:
        return
    bad = df.filter(pl.col("stack_id").is_not_null()
                    & ~pl.col("stack_id").is_in(stack_ids.implode()))
    if bad.height:
        raise _fail(source, table, f"{bad.height} row(s) whose stack_id is not in the stack "
                                   f"table (first: {bad['stack_id'][0]})")


def check_tables(tables: dict[str, pl.DataFrame], source: str = "capture"
                 ) -> dict[str, pl.DataFrame]:
    """All checks over a set of in-memory tables (a producer's output); truncations applied."""
    out = {t: check_table(t, df, source) if isinstance(df, pl.DataFrame) else df
           for t, df in tables.items()}
    frames, stacks = out.get("frame"), out.get("stack")
    if isinstance(stacks, pl.DataFrame) and isinstance(frames, pl.DataFrame):
        check_stacks(stacks, frames["frame_id"], source)
        for t in ("call", "span", "range"):
            if isinstance(out.get(t), pl.DataFrame):
                check_refs(t, out[t], stacks["stack_id"], source)
    return out
