"""``Capture.runs``: a table read a part of its time at a time, from its own row groups (found
from the footer), every row in exactly one part, however its row groups interleave with the
other tables' or overlap one another in time."""
from __future__ import annotations

import polars as pl
import pyarrow.parquet as pq
import pytest
from zym.rules.testing import CaptureBuilder
from zym.schemas.io import CaptureWriter, open_capture


def _capture(tmp_path, chunks: list[tuple[int, int]]):
    """A capture whose calls are written in ``chunks`` (a row group each: ``[start, end)``
    of a builder's calls, in that order, so their times may overlap), a row group of GPU
    operations after each."""
    b = CaptureBuilder()
    for i in range(400):
        b.kernel([("python", "step", "s.py", 1 + i % 7)], "k", gpu_us=1)
        b.tick(3)
    t = b.tables()
    base = open_capture(b.write(tmp_path / "base.parquet"))
    calls = t["call"]
    out = tmp_path / "c.parquet"
    gpu = t["gpu"]
    with CaptureWriter(out, base.meta) as w:
        for table in ("frame", "stack"):
            w.write(table, t[table])
        for k, (lo, hi) in enumerate(chunks):
            w.write("call", calls[lo:hi])
            w.write("gpu", gpu[k * 100:(k + 1) * 100])
    return open_capture(out), calls


@pytest.mark.parametrize("rows", [1, 50, 120, 10_000])
@pytest.mark.parametrize("chunks", [
    [(0, 100), (100, 250), (250, 400)],          # in time order
    [(250, 400), (0, 120), (120, 250)],          # out of order
    [(0, 200), (100, 300), (300, 400), (0, 50)],  # overlapping: rows twice in the file
])
def test_every_row_in_one_part(tmp_path, rows, chunks):
    cap, _ = _capture(tmp_path, chunks)
    groups = cap.row_groups()
    assert groups is not None and [g[0] for g in groups].count("call") == len(chunks)
    got = pl.concat([p.select("ts_ns", "stack_id").collect()
                     for p in cap.runs("call", rows=rows)])
    # the file's own call rows, read by pyarrow: the same rows, as many times each
    raw = pq.read_table(cap.path, columns=["record", "ts_ns", "stack_id"]).to_pylist()
    want = sorted((r["ts_ns"], r["stack_id"]) for r in raw if r["record"] == "call")
    assert sorted(got.iter_rows()) == want
    # a part a run of row groups of about ``rows`` rows: one part where they all fit
    assert (len(list(cap.runs("call", rows=rows))) == 1) == (rows >= 10_000)


def test_row_groups_of_several_tables_fall_back_to_slices(tmp_path, monkeypatch):
    from zym.schemas.io import Capture

    cap, calls = _capture(tmp_path, [(0, 400)])
    monkeypatch.setattr(Capture, "_row_groups", lambda self: None)
    got = pl.concat([p.collect() for p in cap.runs("call", codes=("name",), rows=64)])
    assert got.height == calls.height and got["name"].dtype == pl.Categorical
