"""NVTX ranges in real zym captures from the H200 (bench/nvtx/device_nvtx.sh, kept in
bench/nvtx/results/h200). What the ranges must be comes from bench/nvtx/nvtx_workload.py:
"step" around "forward" and "sample" on the main thread (40 measured steps after warm-up),
"background" on a second thread; under emit_nvtx one range per aten op."""
from __future__ import annotations

from pathlib import Path

import polars as pl
from zym.schemas import open_capture

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "nvtx" / "results" / "h200"


def test_annotated_ranges_nest_as_the_workload_pushes_them():
    cap = open_capture(RESULTS / "ranges.parquet")
    r = cap.load("range")
    by = dict(r.group_by("name").agg(pl.col("depth").unique().sort()).iter_rows())
    assert by == {"step": [0], "forward": [1], "sample": [1], "background": [0]}
    counts = dict(r.group_by("name").len().iter_rows())
    assert counts["step"] == counts["forward"] == counts["sample"] >= 40
    main_tid = r.filter(pl.col("name") == "step")["tid"].unique().to_list()
    assert len(main_tid) == 1
    assert r.filter(pl.col("name") == "background")["tid"].unique().to_list() != main_tid
    # each forward/sample lies inside one step of its thread, by the records' own times
    steps = r.filter(pl.col("name") == "step").select("tid", "ts_ns", (pl.col("ts_ns") + pl.col(
        "dur_ns")).alias("end"))
    inner = r.filter(pl.col("depth") == 1).select("tid", pl.col("ts_ns").alias("s"),
                                                   (pl.col("ts_ns") + pl.col("dur_ns")).alias("e"))
    inside = inner.join(steps, on="tid").filter((pl.col("s") >= pl.col("ts_ns"))
                                                & (pl.col("e") <= pl.col("end")))
    assert inside.height == inner.height


def test_calls_inside_a_range_carry_it_as_a_frame():
    cap = open_capture(RESULTS / "ranges.parquet")
    stacks = cap.load("stack").join(cap.load("frame"), on="frame_id")
    nvtx = stacks.filter(pl.col("kind") == "nvtx")
    assert set(nvtx["name"]) >= {"step", "forward", "sample"}
    # on the calls' paths the layer sits under the Python frames, above native/op/API frames
    rows = {r["stack_id"]: r for r in stacks.iter_rows(named=True)}
    inside = 0
    for sid in cap.load("call")["stack_id"].drop_nulls().unique():
        kinds, node = [], rows.get(sid)
        while node is not None:
            kinds.append(node["kind"])
            node = rows.get(node["parent_id"])
        kinds.reverse()          # root first
        if "nvtx" in kinds:
            inside += 1
            first, last = kinds.index("nvtx"), len(kinds) - 1 - kinds[::-1].index("nvtx")
            assert set(kinds[:first]) == {"python"}, kinds
            assert set(kinds[first:last + 1]) == {"nvtx"}, kinds
            assert "python" not in kinds[last + 1:], kinds
    assert inside > 10


def test_emit_nvtx_gives_one_range_per_aten_op():
    r = open_capture(RESULTS / "emit.parquet").load("range")
    assert r.height > 1000
    assert r["name"].str.starts_with("aten::").mean() > 0.95
