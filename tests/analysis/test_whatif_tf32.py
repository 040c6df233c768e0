"""compute.tf32-matmul-could-be-bf16 on a GPU (bench/whatif/results/h100-tf32; on an H100: the
device tool lent one): a float32 transformer with TF32 allowed, zym's findings on a
torch.profiler trace of it, against what running it in bfloat16 saved (docs/benchmarks.md,
"A float32 model on TF32")."""
from __future__ import annotations

from pathlib import Path

import pytest
from whatif_compare import compare, docs_table

ROOT = Path(__file__).resolve().parents[2]
TF32 = ROOT / "bench" / "whatif" / "results" / "h100-tf32"
REQUESTS = {"tf32mlp": 6}   # len(Service.requests)


@pytest.fixture(scope="module")
def rows():
    return compare.compare(TF32, REQUESTS)


def test_docs_table_is_what_the_traces_give_today(rows):
    assert docs_table("whatif-tf32-table") == compare.markdown(rows), (
        "docs/benchmarks.md is stale: python bench/whatif/compare.py "
        "bench/whatif/results/h100-tf32 --requests tf32mlp=6 --markdown")


def test_bf16_is_first_and_its_gemm_only_estimate_a_lower_bound(rows):
    """The estimate prices the GEMMs alone; bfloat16 also sped up attention and the layers
    between the GEMMs: it is under the measured saving, and more than half of it."""
    [r] = [r for r in rows if r.variant == "bf16"]
    assert r.rule_id == "compute.tf32-matmul-could-be-bf16" and r.rank == 1
    assert not r.noise and 0.5 * r.measured_ms < r.predicted_ms < r.measured_ms, r


def test_gemms_alone_are_what_the_estimate_prices():
    """From the two traces: the GEMMs' GPU time a request in float32/TF32 and in bfloat16;
    the estimate is within 30% of that difference (the step is GPU-bound)."""
    import polars as pl
    from zym.analysis import analyze
    from zym.rules import evaluate

    def gemm_ms(path: Path) -> float:
        a = analyze(path)
        g = a.facts.gpu.filter(pl.col("op_class") == "gemm")
        return g["dur_ns"].sum() / a.steps_in_window().count / 1e6

    gained = gemm_ms(TF32 / "kineto" / "tf32mlp.parquet") - gemm_ms(
        TF32 / "kineto" / "tf32mlp-bf16.parquet")
    a = analyze(TF32 / "kineto" / "tf32mlp.parquet")
    [f] = [f for f in evaluate(a) if f.rule_id == "compute.tf32-matmul-could-be-bf16"]
    predicted = f.saving_ns / a.steps_in_window().count / 1e6
    assert 0.7 <= predicted / gained <= 1.3
