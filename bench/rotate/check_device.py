"""The H200 check of `zym capture --rotate` (bench/whatif/device_new_b.sh): the interval files
of one run of a deterministic service against a one-file capture of another run of the same
command (same requests, same passes: the same kernels).

    python bench/rotate/check_device.py ROT_DIR ONE.parquet [--json OUT]

Read from the files themselves (not from zym's summary): every interval written (no raw
interval kept), kernels by name in all the files together against the one file, each GPU
record in one file only ((pid, correlation id) unique across files), each file's GPU records
joined to calls of that file, the intervals back to back, and the share of GPU time with its
Python stack per file.
"""
from __future__ import annotations

import argparse
import json
import sys
from itertools import pairwise
from pathlib import Path

import polars as pl
from zym.schemas import open_capture


def files_of(rot: Path) -> list[Path]:
    return sorted(rot.glob("*-[0-9][0-9][0-9][0-9].parquet"),
                  key=lambda p: int(p.stem.rsplit("-", 1)[1]))


def check(rot: Path, one: Path) -> dict:
    files = files_of(rot)
    gpus, calls, bounds, per_file = [], [], [], []
    for f in files:
        cap = open_capture(f)
        iv = cap.meta.extra["interval"]
        g, c = cap.load("gpu"), cap.load("call")
        bounds.append((iv["start_mono_ns"], iv["end_mono_ns"]))
        orphan = g.filter(pl.col("correlation_id").is_not_null()).join(
            c, on=["pid", "correlation_id"], how="anti").height if g.height else 0
        cover = (cap.meta.extra.get("cupti") or {}).get("stack_coverage") or {}
        per_file.append({"file": f.name, "calls": c.height, "gpu_ops": g.height,
                         "gpu_ops_without_their_call_here": orphan,
                         "gpu_time_with_stack_pct": cover.get("gpu_time_with_stack_pct")})
        if g.height:
            gpus.append(g.select("pid", "correlation_id", "kind", "name", "dur_ns"))
        calls.append(c.select("name"))
    allg = pl.concat(gpus)
    ref = open_capture(one).load("gpu")
    a, b = (t.filter(pl.col("kind") == "kernel").group_by("name").len().sort("name")
            for t in (allg, ref))
    diff = a.join(b, on="name", how="full", suffix="_one", coalesce=True).fill_null(0).filter(
        pl.col("len") != pl.col("len_one"))
    dup = (allg.filter(pl.col("correlation_id").is_not_null())
           .group_by("pid", "correlation_id", "kind").len().filter(pl.col("len") > 1).height)
    gaps = [b2[0] - b1[1] for b1, b2 in pairwise(bounds)]
    return {
        "files": len(files), "raw_intervals_kept": len(list(rot.glob("*.raw-*"))),
        "kernels_in_files": int(a["len"].sum()), "kernels_one_file": int(b["len"].sum()),
        "kernel_names_with_other_counts": diff.height,
        "gpu_ops_in_files": allg.height, "gpu_ops_one_file": ref.height,
        "gpu_ops_by_kind_files": dict(allg.group_by("kind").len().iter_rows()),
        "gpu_ops_by_kind_one": dict(ref.group_by("kind").len().iter_rows()),
        "records_in_two_files": dup, "interval_gaps_ns": sorted(set(gaps)),
        "per_file": per_file,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("rot", type=Path)
    p.add_argument("one", type=Path)
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    out = check(a.rot, a.one)
    text = json.dumps(out, indent=1)
    if a.json:
        a.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
