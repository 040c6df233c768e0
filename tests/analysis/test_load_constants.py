"""Columns holding one value in every row are loaded as constants (stored once): the tables
read the same, value for value and type for type, as the capture file's."""
from __future__ import annotations

from pathlib import Path

import polars as pl
from polars.testing import assert_frame_equal
from zym.analysis.load import ENUM_COLUMNS, constant_columns, load_capture
from zym.schemas.io import open_capture

REPO = Path(__file__).resolve().parents[2]
EBPF_SAMPLE = REPO / "sample_traces" / "gpt_decode_server.parquet"
KINETO_SAMPLE = REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"


def test_constant_columns_keep_every_value_and_type():
    df = pl.DataFrame({
        "same": pl.Series([7, 7, 7, 7], dtype=pl.Int64),
        "none": pl.Series([None] * 4, dtype=pl.Int32),
        "some_null": pl.Series([1, None, 1, 1], dtype=pl.Int64),
        "varies": pl.Series([1, 2, 1, 1], dtype=pl.Int64),
        "zeros": pl.Series([0.0, -0.0, 0.0, 0.0]),
        "text": ["a", "a", "a", "a"],
        "no_text": pl.Series([None] * 4, dtype=pl.String),
    })
    out = constant_columns(df)
    assert_frame_equal(out, df)
    assert out["zeros"].to_list()[1] == 0.0 and str(out["zeros"].to_list()[1]) == "-0.0"
    assert constant_columns(df.clear()).height == 0


def test_loaded_tables_are_the_file_tables():
    """Every table the analysis loads equals the file's (the enum columns as categories)."""
    data = load_capture(EBPF_SAMPLE)
    cap = open_capture(EBPF_SAMPLE)
    for table, got in (("frame", data.frames), ("stack", data.stacks), ("call", data.calls),
                       ("gpu", data.gpu)):
        want = cap.load(table)
        want = want.with_columns(pl.col(c).cast(pl.Categorical) for c in ENUM_COLUMNS
                                 if c in want.columns)
        assert_frame_equal(got, want)
        # the same rows when filtered and gathered, as the analysis does
        assert_frame_equal(got[::3], want[::3])


def test_a_capture_of_many_row_groups_loads_as_one_chunk_per_column(tmp_path, monkeypatch):
    """A capture written in many row groups (10 M GPU operations are 10 of them) loads with
    every column in one piece: polars aligns a frame's columns whose pieces differ (a column
    added or held as a constant is one piece) by copying every column of the frame on each
    eager select, 0.3-0.5 s and ~0.9 GB at 10 M GPU operations. The same rows and values."""
    from zym.schemas import io
    from zym.schemas.io import write_capture

    cap = open_capture(EBPF_SAMPLE)
    tables = {t: cap.load(t) for t in ("frame", "stack", "call", "gpu")}
    monkeypatch.setattr(io, "ROW_GROUP_ROWS", 97)
    path = write_capture(tmp_path / "groups.parquet", tables, cap.meta)
    assert open_capture(path).load("gpu")["ts_ns"].n_chunks() > 1  # read in pieces
    data = load_capture(path)
    for table, got in (("frame", data.frames), ("stack", data.stacks), ("call", data.calls),
                       ("gpu", data.gpu)):
        assert set(got.n_chunks("all")) == {1}, table
        want = tables[table].with_columns(pl.col(c).cast(pl.Categorical) for c in ENUM_COLUMNS
                                          if c in tables[table].columns)
        assert_frame_equal(got, want)


def test_the_analysis_leaves_out_the_columns_it_never_reads():
    """The analysis loads a capture without the calls' device, stream and callback ids (100-200
    MB at 12.5 M calls where recorded); the exports' load keeps them with their values, and
    the analysis' conformed calls hold them as nulls (what a reader of them would see)."""
    from zym.analysis import analyze
    from zym.analysis.facts import conformed
    from zym.analysis.load import UNREAD

    cap = open_capture(EBPF_SAMPLE).load("call")
    assert cap["stream_id"].null_count() < cap.height  # recorded: something to leave out
    analysis = analyze(EBPF_SAMPLE, lambda _stage: None, "all")
    assert not set(UNREAD["call"]) & set(analysis.data.calls.columns)
    # (its text columns as codes: the names, the torch ops' shapes and dtypes)
    assert_frame_equal(analysis.data.calls, load_capture(EBPF_SAMPLE).calls.drop(UNREAD["call"])
                       .with_columns(pl.col("name", "op_shapes", "op_dtypes")
                                     .cast(pl.Categorical)))
    held = conformed(analysis.data, "call")
    assert all(held[c].null_count() == held.height for c in UNREAD["call"])
    full = load_capture(EBPF_SAMPLE)  # the exports' load
    assert full.calls["stream_id"].equals(cap["stream_id"])


def test_the_analysis_leaves_out_the_gpu_block_sizes_and_the_spans_shapes():
    """The GPU operations' block sizes (no analysis or rule reads them) and the spans' operator
    shapes (the analysis reads the calls') are not held by the analysis, on the H200 capture
    and the H200 Kineto trace; the exports' load keeps them with their values."""
    from zym.analysis import analyze
    from zym.analysis.load import UNREAD

    gpu = open_capture(EBPF_SAMPLE).load("gpu")
    assert gpu["block_x"].null_count() < gpu.height   # recorded: something to leave out
    analysis = analyze(EBPF_SAMPLE, lambda _stage: None, "all")
    assert not set(UNREAD["gpu"]) & set(analysis.data.gpu.columns)
    full = load_capture(EBPF_SAMPLE)   # the exports' load
    assert full.gpu["block_x"].equals(gpu["block_x"])
    assert_frame_equal(analysis.data.gpu, full.gpu.drop(UNREAD["gpu"])
                       .with_columns(pl.col("name").cast(pl.Categorical)))

    spans = analyze(KINETO_SAMPLE, lambda _stage: None, "all").data.spans()
    assert spans.height and not set(UNREAD["span"]) & set(spans.columns)
    kept = load_capture(KINETO_SAMPLE).spans()
    assert kept["op_shapes"].null_count() < kept.height
    assert_frame_equal(spans, kept.drop(UNREAD["span"]))
