"""What a capture holds of its NVTX ranges (bench/nvtx/device_nvtx.sh's captures, finalized here).

    python3 bench/nvtx/check_nvtx.py CAPTURE.parquet [--json OUT.json]

Prints: whether the agent recorded NVTX in each process and why not; how many ranges and marks,
clipped ones, per thread; the share of GPU time (kernels, copies, memsets) launched by a call
inside at least one range (read from the calls' stacks: an ``nvtx`` frame on the path); whether
the ranges nest as pushed (a range at depth d > 0 lies within the latest range of depth d - 1
of its thread that began before it; ranges of one depth do not overlap); the most frequent
(parent, child) pairs; and the call paths with the most GPU time, ranges included.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # a checkout without install


def _schemas():
    try:
        from zym.schemas import open_capture
    except ImportError:   # the repository layout, not installed: tests/ebpf/device's shim
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "capture_driver", Path(__file__).resolve().parents[2] / "tests" / "ebpf" / "device"
            / "capture_driver.py")
        driver = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(driver)
        driver.import_zym()
        from zym.schemas import open_capture
    return open_capture


def path_names(frames: pl.DataFrame, stacks: pl.DataFrame) -> dict[int, list[tuple[str, str]]]:
    """Every stack node's path, root first, as (kind, name): one step per distinct node."""
    kind = dict(zip(frames["frame_id"], frames["kind"]))
    name = dict(zip(frames["frame_id"], frames["name"]))
    paths: dict[int, list[tuple[str, str]]] = {}
    for sid, parent, fid in stacks.sort("depth").select("stack_id", "parent_id", "frame_id").iter_rows():
        paths[sid] = (paths.get(parent, []) if parent is not None else []) + [(kind[fid], name[fid])]
    return paths


def nesting(ranges: pl.DataFrame) -> dict:
    """Violations of push/pop nesting, and the (parent, child) name pairs."""
    r = (ranges.filter(pl.col("kind") == "nvtx")
         .with_columns((pl.col("ts_ns") + pl.col("dur_ns")).alias("end"))
         .sort("pid", "tid", "ts_ns"))
    up = r.select("pid", "tid", (pl.col("depth") + 1).alias("depth"),
                  pl.col("ts_ns").alias("p_ts"), pl.col("end").alias("p_end"),
                  pl.col("name").alias("parent")).sort("p_ts")
    child = r.filter(pl.col("depth") > 0).sort("ts_ns").join_asof(
        up, left_on="ts_ns", right_on="p_ts", by=["pid", "tid", "depth"], strategy="backward",
        check_sortedness=False)
    outside = child.filter(pl.col("p_end").is_null() | (pl.col("end") > pl.col("p_end")))
    prev_end = pl.col("end").shift(1).over("pid", "tid", "depth", order_by="ts_ns")
    overlap = r.filter(prev_end > pl.col("ts_ns"))
    strip = r"^([^,]*),.*$"
    pairs = (child.group_by(pl.col("parent").str.replace(strip, "$1"),
                            pl.col("name").str.replace(strip, "$1").alias("child"))
             .len().sort("len", descending=True).head(8))
    return {"ranges_nested_below_depth_0": child.height, "outside_their_parent": outside.height,
            "overlapping_siblings": overlap.height,
            "top_pairs": [f"{p} > {c}: {n}" for p, c, n in pairs.iter_rows()]}


def check(path: Path) -> dict:
    cap = _schemas()(path)
    ranges, calls, gpu = cap.load("range"), cap.load("call"), cap.load("gpu")
    frames, stacks = cap.load("frame"), cap.load("stack")
    paths = path_names(frames, stacks)
    in_range = {sid for sid, p in paths.items() if any(k == "nvtx" for k, _ in p)}
    work = gpu.filter(pl.col("kind") != "sync").join(
        calls.filter(pl.col("correlation_id").is_not_null())
        .select("pid", "correlation_id", "stack_id").unique(["pid", "correlation_id"]),
        on=["pid", "correlation_id"], how="left")
    inside = work["stack_id"].is_in(list(in_range)).fill_null(False)
    total = int(work["dur_ns"].sum())
    top = (work.group_by("stack_id").agg(pl.col("dur_ns").sum()).sort("dur_ns", descending=True)
           .head(5))
    threads = ranges.group_by("pid", "tid").agg(
        (pl.col("kind") == "nvtx").sum().alias("ranges"),
        (pl.col("kind") == "nvtx_mark").sum().alias("marks"),
        pl.col("clipped").is_not_null().sum().alias("clipped"))
    ranged_threads = threads.select("pid", "tid")
    calls_there = calls.join(ranged_threads, on=["pid", "tid"], how="semi")
    return {
        "capture": str(path), "nvtx": cap.meta.extra.get("nvtx"),
        "ranges": int((ranges["kind"] == "nvtx").sum()),
        "marks": int((ranges["kind"] == "nvtx_mark").sum()),
        "clipped": dict(ranges.group_by("clipped").len().drop_nulls().iter_rows()),
        "threads": threads.sort("ranges", descending=True).to_dicts(),
        "gpu_ns": total,
        "gpu_ns_in_ranges": int(work.filter(inside)["dur_ns"].sum()),
        "gpu_time_in_ranges_pct": round(100 * int(work.filter(inside)["dur_ns"].sum()) / total, 2)
        if total else 0.0,
        "calls_on_threads_with_ranges": calls_there.height,
        "of_them_inside_a_range": int(calls_there["stack_id"].is_in(list(in_range)).sum()),
        "nesting": nesting(ranges),
        "top_paths": [{"gpu_ms": round(ns / 1e6, 3), "path": " > ".join(
            f"[{n}]" if k == "nvtx" else n for k, n in paths.get(sid, [("?", "(no stack)")])[-8:])}
            for sid, ns in top.iter_rows()],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("capture", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    doc = check(a.capture)
    text = json.dumps(doc, indent=1, default=str)
    print(text)
    if a.json:
        a.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
