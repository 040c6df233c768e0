"""A capture's tables as checked: names past the limit are cut, by characters, not bytes."""
from __future__ import annotations

import polars as pl
from zym.schemas.validate import MAX_NAME_CHARS, _truncate


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


def test_a_table_with_no_long_name_keeps_its_columns():
    df = pl.DataFrame({"name": ["é" * MAX_NAME_CHARS, "b"], "file": ["a.py", None]})
    out = _truncate(df)
    assert out.equals(df)
