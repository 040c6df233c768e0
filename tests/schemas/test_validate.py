"""A capture's tables as checked: names past the limit are cut, by characters, not bytes; values
out of range refused, as a row-by-row check would."""
from __future__ import annotations

import random

import polars as pl
import pytest
from zym.schemas.tables import REQUIRED
from zym.schemas.validate import (
    I64,
    MAX_NAME_CHARS,
    RANGES,
    InvalidCaptureError,
    _truncate,
    check_table,
)


def test_names_past_the_limit_are_cut_to_it_and_only_those():
    limit = MAX_NAME_CHARS
    names = ["aten::mm",
             "é" * limit,  # at the limit: twice as many bytes, not cut
             "x" * (limit + 1),
             "é" * (limit + 5),
             None]
    df = pl.DataFrame({"name": names, "file": ["f.py", None, "y" * (limit + 2), "g.py", "h.py"]})
    out = _truncate(df)
    want = [None if n is None else n if len(n) <= limit else n[:limit - 1] + "…" for n in names]
    assert out["name"].to_list() == want
    assert [len(n) for n in want if n] == [8, limit, limit, limit]
    assert out["file"].to_list() == ["f.py", None, "y" * (limit - 1) + "…", "g.py", "h.py"]


@pytest.mark.parametrize("long", [True, False])
def test_names_read_as_codes_are_cut_as_their_text(long):
    """Names read as categorical codes (the analysis's capture load): cut as the text is,
    still codes; with no long name, the column as it was."""
    limit = MAX_NAME_CHARS
    names = ["aten::mm", "é" * limit, "x" * (limit + 1) if long else "x", None, "aten::mm"]
    text = pl.DataFrame({"name": names, "file": ["f.py", None, "g.py", "h.py", None]})
    codes = text.with_columns(pl.col("name").cast(pl.Categorical))
    out = _truncate(codes)
    assert out.schema["name"] == pl.Categorical
    assert out["name"].cast(pl.String).to_list() == _truncate(text)["name"].to_list()
    assert (out["name"].cast(pl.String).to_list() == names) is not long


def test_a_table_with_no_long_name_keeps_its_columns():
    df = pl.DataFrame({"name": ["é" * MAX_NAME_CHARS, "b"], "file": ["a.py", None]})
    out = _truncate(df)
    assert out.equals(df)


def _expected_error(df: pl.DataFrame) -> tuple[str, int] | None:
    """The first failing check by plain Python over the rows: each ``RANGES`` column in
    order, then whether each row's end fits in int64 (exact integers)."""
    rows = df.to_dicts()
    for c, (lo, hi) in RANGES.items():
        if c in df.columns:
            n = sum(1 for r in rows if r[c] is not None and not lo <= r[c] <= hi)
            if n:
                return c, n
    n = sum(1 for r in rows if r["ts_ns"] is not None and r["dur_ns"] is not None
            and r["dur_ns"] >= 0 and r["ts_ns"] + r["dur_ns"] > I64)
    return ("ts_ns + dur_ns", n) if n else None


def test_range_checks_match_a_row_by_row_check():
    """Values at, inside and just past each range's ends, and ends at the int64 limit: the
    check names the same first column and count as a row-by-row check (extremes-first must
    not let a row through, nor fail a table whose every row fits)."""
    rng = random.Random(7)
    cols = {"ts_ns": RANGES["ts_ns"], "dur_ns": RANGES["dur_ns"], "pid": RANGES["pid"],
            "depth": RANGES["depth"], "device_id": RANGES["device_id"]}

    def value(c: str, lo: int, hi: int) -> int | None:
        if rng.random() < 0.05:  # an end of the range, just past it (where int64 holds it)
            return rng.choice([v for v in (lo, hi, lo - 1, hi + 1, None)
                               if (v is None and c not in REQUIRED["call"])
                               or (v is not None and -I64 - 1 <= v <= I64)])
        return rng.randint(max(lo, -1000), min(hi, 1000))

    seen = set()
    for _ in range(300):
        n = rng.randint(0, 12)
        data = {c: [value(c, lo, hi) for _ in range(n)] for c, (lo, hi) in cols.items()}
        if n and rng.random() < 0.3:  # an end at or past the int64 limit
            i = rng.randrange(n)
            data["ts_ns"][i], data["dur_ns"][i] = I64 - 10, rng.choice([9, 10, 11, 5_000])
        df = pl.DataFrame({c: pl.Series(v, dtype=pl.Int64) for c, v in data.items()})
        want = _expected_error(df)
        seen.add(want[0] if want else None)
        if want is None:
            check_table("call", df)
            continue
        with pytest.raises(InvalidCaptureError) as e:
            check_table("call", df)
        assert f"{want[1]} row(s) with {want[0]} out of range" in str(e.value)
    assert {"ts_ns", "dur_ns", "pid", "depth", "device_id", "ts_ns + dur_ns", None} <= seen
