"""The eighth blind round (bench/whatif/results/h100-blind8; on an H100): services written by a
helper that saw neither zym's rules nor its output (kwspot, vecsearch, vidsr), measured before
zym saw them; zym's findings on a torch.profiler trace of each baseline against every
variant's measured saving (docs/benchmarks.md, "An eighth blind round"). zym's step is a
request (5, 3 and 3 a traced pass)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
from whatif_compare import (
    check_docs_table,
    check_steps_are_requests,
    compare,
    raw_spans,
    workload_constant,
)

ROOT = Path(__file__).resolve().parents[2]
BLIND8 = ROOT / "bench" / "whatif" / "results" / "h100-blind8"
STEPS = {"kwspot": 5, "vecsearch": 3, "vidsr": 3}   # zym's steps in one traced pass


def test_docs_table_is_what_the_traces_give_today():
    check_docs_table("whatif-blind8-table", compare.compare(BLIND8, STEPS), BLIND8, STEPS)


def test_the_steps_are_the_requests_of_a_pass():
    check_steps_are_requests(BLIND8, STEPS)


def _busy(gpu: pl.DataFrame, lo: int, hi: int) -> int:
    """GPU time (kernels, copies, memsets) inside [lo, hi), from the raw rows."""
    return int(gpu.select((pl.min_horizontal(pl.col("ts_ns") + pl.col("dur_ns"), hi)
                           - pl.max_horizontal("ts_ns", lo)).clip(0)).sum().item())


def test_vidsr_s_numpy_phases_are_found_though_its_gpu_is_busy_half_its_requests():
    """vidsr estimates motion by numpy FFTs (phase_shift, once per frame pair) and packs its
    output in numpy after the copy back. From the raw rows: its GPU is busy more than half of
    each request (the CPU-bound rule's old limit, which let this pass unseen), and all but
    nothing during the phase_shift spans; the finding is there now, first."""
    path = BLIND8 / "kineto" / "vidsr.parquet"
    spans = raw_spans(path)
    gpu = (pl.read_parquet(path, columns=["record", "ts_ns", "dur_ns"])
           .filter(pl.col("record") == "gpu"))
    handle = spans.filter(pl.col("name") == "handle").sort("ts_ns")
    shifts = spans.filter(pl.col("name") == "phase_shift")
    assert shifts.height == handle.height * (workload_constant("vidsr", "FRAMES") + 1)
    busy = sum(_busy(gpu, t, t + d) for t, d in handle.select("ts_ns", "dur_ns").rows())
    assert busy > 0.5 * handle["dur_ns"].sum()
    during = sum(_busy(gpu, t, t + d) for t, d in shifts.select("ts_ns", "dur_ns").rows())
    assert during < 0.01 * shifts["dur_ns"].sum()
    from zym.analysis import analyze
    from zym.rules import evaluate

    found = evaluate(analyze(path))
    assert found[0].rule_id == "utilization.cpu-bound-step"
