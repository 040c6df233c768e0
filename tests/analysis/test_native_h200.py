"""Native frames and the torch op layer in real zym captures from the H200 (bench/native, kept
in bench/native/results/h200): torch 2.11 + CUDA 13, recorded by `zym capture` with eBPF and
CUPTI, unwound on the device. The operator of each kernel is checked against a torch.profiler
trace of the same workload (another process, same machine), where Kineto's own cpu_op
nesting gives it: a second method, not zym's unwinding."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from zym.capture.native import CUT_FRAME
from zym.schemas import open_capture

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "native" / "results" / "h200"
TORCH_LIBS = ("libtorch_cpu.so", "libtorch_cuda.so", "libtorch_python.so")


def kernel_ops(path: Path) -> pl.DataFrame:
    """Each kernel of a capture with the innermost torch op on its launching call's path."""
    cap = open_capture(path)
    stacks = cap.load("stack").join(cap.load("frame"), on="frame_id")
    rows = {r["stack_id"]: r for r in stacks.iter_rows(named=True)}
    op_of: dict[int, str | None] = {}
    for sid, first in rows.items():
        node = first
        while node is not None and node["kind"] != "torch_op":
            node = rows.get(node["parent_id"])
        op_of[sid] = node["name"] if node is not None else None
    calls = cap.load("call").filter(pl.col("correlation_id").is_not_null()).with_columns(
        pl.col("stack_id").replace_strict(op_of, default=None, return_dtype=pl.String)
        .alias("op"))
    return (cap.load("gpu").filter(pl.col("kind") == "kernel")
            .join(calls.select("pid", "correlation_id", "op"), on=["pid", "correlation_id"],
                  how="left"))


def dominant(k: pl.DataFrame) -> dict[str, str | None]:
    per = k.group_by("name", "op").agg(pl.col("dur_ns").sum()).sort("dur_ns", descending=True)
    return dict(per.unique("name", keep="first").select("name", "op").iter_rows())


@pytest.mark.parametrize("name", ["gpt_decode", "rerank"])
def test_every_kernel_has_its_operator(name):
    k = kernel_ops(RESULTS / f"{name}.parquet")
    assert k.height > 1000
    share = k.filter(pl.col("op").is_not_null())["dur_ns"].sum() / k["dur_ns"].sum()
    assert share >= 0.95, share


@pytest.mark.parametrize("name", ["gpt_decode", "rerank"])
def test_native_parts_reach_python_and_torch_frames_are_symbolised(name):
    cap = open_capture(RESULTS / f"{name}.parquet")
    frames = cap.load("frame").filter(pl.col("kind") == "native")
    assert frames.filter(pl.col("name").str.starts_with(CUT_FRAME)).height == 0
    torch = frames.filter(pl.col("file").str.contains("|".join(TORCH_LIBS)))
    assert torch.height > 50      # distinct frames
    assert torch.filter(pl.col("name").str.starts_with("[")).height == 0
    # the binding frame sits right under Python: every path passes through libtorch_python
    assert frames.filter(pl.col("file").str.ends_with("libtorch_python.so")).height > 0
    meta = cap.meta.extra["native"]
    assert meta["unwound_to_python"] == meta["paths"] == meta["with_torch_op"]


def test_operators_agree_with_the_torch_profiler_trace(tmp_path):
    from zym.capture.kineto import import_kineto

    trace = tmp_path / "rerank.trace.parquet"
    import_kineto(RESULTS / "rerank.trace.json.gz", trace)
    ours, theirs = dominant(kernel_ops(RESULTS / "rerank.parquet")), dominant(kernel_ops(trace))
    both = sorted(set(ours) & set(theirs))
    assert len(both) >= 5
    assert {n: ours[n] for n in both} == {n: theirs[n] for n in both}
