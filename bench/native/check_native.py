"""Native frames and the op layer in a zym capture, measured from the capture file alone,
and, given a torch.profiler trace of the same workload, compared with it.

    python3 bench/native/check_native.py CAPTURE.parquet [TRACE.json.gz] [--json OUT]

Prints (each figure says what it counts):
* GPU time whose call path holds a torch operator (``torch_op`` frame);
* calls whose native part (the frames between the innermost Python frame and the API) is
  present, unwound to Python (no "[native stack cut]" frame), and fully symbolised;
* with a trace: per kernel name, the innermost operator of most of its GPU time in each, and
  the share of the capture's GPU time whose kernel has the same operator in both;
* the rules that fire on each (``zym analyze --format json``, whole capture).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

import polars as pl
from zym.capture.native import CUT_FRAME
from zym.schemas import open_capture


def call_paths(path: str) -> pl.DataFrame:
    """Per stack_id: has a torch op, innermost op, native frames, cut, unsymbolised."""
    cap = open_capture(path)
    stacks, frames = cap.load("stack"), cap.load("frame")
    nodes = stacks.join(frames, on="frame_id")
    rows = {r["stack_id"]: r for r in nodes.iter_rows(named=True)}
    out = []
    for sid, first in rows.items():
        node, op, native, cut, unsym = first, None, 0, False, 0
        while node is not None:
            if node["kind"] == "torch_op" and op is None:
                op = node["name"]
            if node["kind"] == "native" and node["file"]:
                native += 1
                unsym += node["name"].startswith("[")
            if node["kind"] == "native" and node["name"].startswith(CUT_FRAME):
                cut = True
            node = rows.get(node["parent_id"])
        out.append({"stack_id": sid, "op": op, "native": native, "cut": cut, "unsym": unsym})
    return pl.DataFrame(out, schema={"stack_id": pl.Int64, "op": pl.String, "native": pl.Int64,
                                     "cut": pl.Boolean, "unsym": pl.Int64})


def gpu_by_call(path: str) -> pl.DataFrame:
    cap = open_capture(path)
    calls = cap.load("call").filter(pl.col("correlation_id").is_not_null())
    gpu = cap.load("gpu").filter(pl.col("kind") == "kernel")
    return gpu.join(calls.select("pid", "correlation_id", "stack_id"),
                    on=["pid", "correlation_id"], how="left")


def rules(path: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "zym.cli.main", "analyze", path, "--format",
                          "json", "--window", "all", "--top", "50"], capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        return [f"(analyze failed: {out.stderr.strip()[:200]})"]
    return sorted({f["rule_id"] for f in json.loads(out.stdout)["findings"]})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("capture")
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--json")
    a = ap.parse_args()
    paths = call_paths(a.capture)
    calls = open_capture(a.capture).load("call").join(paths, on="stack_id", how="left")
    k = gpu_by_call(a.capture).join(paths, on="stack_id", how="left")
    total = k["dur_ns"].sum()
    res = {
        "capture": a.capture,
        "kernels": k.height,
        "gpu_ns": int(total),
        "gpu_share_with_torch_op": float(k.filter(pl.col("op").is_not_null())["dur_ns"].sum()
                                         / total) if total else None,
        "calls": calls.height,
        "calls_with_native": float((calls["native"].fill_null(0) > 0).mean()),
        "calls_unwound_to_python": float(((calls["native"].fill_null(0) > 0)
                                          & ~calls["cut"].fill_null(True)).mean()),
        "calls_fully_symbolised": float(((calls["native"].fill_null(0) > 0)
                                         & (calls["unsym"].fill_null(1) == 0)).mean()),
        "native_frames_symbolised": float(
            1 - calls["unsym"].fill_null(0).sum() / max(1, calls["native"].fill_null(0).sum())),
        "meta_native": open_capture(a.capture).meta.extra.get("native"),
        "rules_capture": rules(a.capture),
    }
    if a.trace:
        tk = gpu_by_call(a.trace)
        tpaths = call_paths(a.trace)
        tk = tk.join(tpaths, on="stack_id", how="left")

        def dominant(df: pl.DataFrame) -> pl.DataFrame:
            return (df.group_by("name", "op").agg(pl.col("dur_ns").sum())
                    .sort("dur_ns", descending=True).unique("name", keep="first")
                    .select("name", "op"))

        ours, theirs = dominant(k), dominant(tk)
        both = ours.join(theirs, on="name", how="inner", suffix="_trace")
        agree = both.filter(pl.col("op") == pl.col("op_trace"))["name"]
        res["kernel_names_in_both"] = both.height
        res["gpu_share_same_op_as_trace"] = float(
            k.filter(pl.col("name").is_in(agree.to_list()))["dur_ns"].sum() / total)
        res["op_disagreements"] = both.filter(pl.col("op") != pl.col("op_trace")).head(12).rows()
        res["gpu_share_with_torch_op_trace"] = float(
            tk.filter(pl.col("op").is_not_null())["dur_ns"].sum() / tk["dur_ns"].sum())
        res["rules_trace"] = rules(a.trace)
    print(json.dumps(res, indent=1, default=str))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
