"""compute.tf32-matmul-could-be-bf16 on a GPU (bench/whatif/results/h100-tf32; on an H100: the
device tool lent one): a float32 transformer with TF32 allowed, zym's findings on a
torch.profiler trace of it, against what running it in bfloat16 saved (docs/benchmarks.md,
"A float32 model on TF32")."""
from __future__ import annotations

from pathlib import Path

import pytest
from whatif_compare import check_docs_table, compare

ROOT = Path(__file__).resolve().parents[2]
TF32 = ROOT / "bench" / "whatif" / "results" / "h100-tf32"
REQUESTS = {"tf32mlp": 6}   # len(Service.requests)


@pytest.fixture(scope="module")
def rows():
    return compare.compare(TF32, REQUESTS)


def test_docs_table_is_what_the_traces_give_today(rows):
    check_docs_table("whatif-tf32-table", rows, TF32, REQUESTS)


def test_bf16_is_first_and_within_30pct_below_the_measured(rows):
    """The estimate prices the line's GEMMs and memory-bound kernels, not attention (which
    bfloat16 also sped up, 7x): within 30% of the measured saving, and under it."""
    [r] = [r for r in rows if r.variant == "bf16"]
    assert r.rule_id == "compute.tf32-matmul-could-be-bf16" and r.rank == 1
    assert not r.noise and r.agrees and r.predicted_ms < r.measured_ms, r


def test_the_estimate_is_what_the_bfloat16_trace_shows_for_the_kernels_it_prices():
    """From the two traces: the GPU time a request of the kernel classes the rule prices
    (GEMMs, element-wise, norms) in float32/TF32 and in bfloat16; the estimate is within 30%
    of that difference (the step is GPU-bound)."""
    import polars as pl
    from zym.analysis import analyze
    from zym.rules import evaluate

    def priced_ms(path: Path) -> float:
        a = analyze(path)
        g = a.facts.gpu.filter(pl.col("op_class").is_in(["gemm", "elementwise", "norm"]))
        return g["dur_ns"].sum() / a.steps_in_window().count / 1e6

    gained = priced_ms(TF32 / "kineto" / "tf32mlp.parquet") - priced_ms(
        TF32 / "kineto" / "tf32mlp-bf16.parquet")
    a = analyze(TF32 / "kineto" / "tf32mlp.parquet")
    [f] = [f for f in evaluate(a) if f.rule_id == "compute.tf32-matmul-could-be-bf16"]
    predicted = f.saving_ns / a.steps_in_window().count / 1e6
    assert 0.7 <= predicted / gained <= 1.3
