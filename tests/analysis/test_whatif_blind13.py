"""The thirteenth blind round (bench/whatif/results/h100-blind13; on an H100): services written
by a helper that saw neither zym's rules nor its output (docqa, goeval), measured before zym
saw them; zym's findings on a torch.profiler trace and a zym capture of each baseline against
every variant's measured saving (docs/benchmarks.md, "Fifty-seventh round"). A request is
zym's step (6 a pass each)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from whatif_compare import check_docs_table, compare, workload_constant

ROOT = Path(__file__).resolve().parents[2]
BLIND13 = ROOT / "bench" / "whatif" / "results" / "h100-blind13"
REQUESTS = {"docqa": 6, "goeval": 6}   # a pass's requests


def test_docs_table_is_what_the_traces_give_today():
    check_docs_table("whatif-blind13-table", compare.compare(BLIND13, REQUESTS), BLIND13,
                     REQUESTS)


def test_a_pass_is_the_workloads_requests():
    for w, n in REQUESTS.items():
        assert workload_constant(w, "REQUESTS") == n, w


def test_docqas_float32_matmuls_are_priced_as_measured_on_tf32():
    """docqa's first findings (its encoder's float32 matmuls without tensor cores) against the
    tf32 variant, measured after zym named them (an H200, base and tf32 interleaved in one
    process; the trace from an H100, whose base pass was 457 ms against the H200's 453): the
    findings' savings a step, summed, within 30% of the paired saving a request, from the raw
    times of each round."""
    from zym.analysis import analyze
    from zym.rules import evaluate

    doc = json.loads((BLIND13 / "docqa.tf32.measure.json").read_text())["variants"]
    saved = statistics.median(b - t for b, t in zip(doc["base"]["times_s"],
                                                     doc["tf32"]["times_s"]))
    per_request_ns = saved / REQUESTS["docqa"] * 1e9
    analysis = analyze(BLIND13 / "kineto" / "docqa.parquet")
    findings = evaluate(analysis)
    tf32 = [f for f in findings if f.rule_id == "compute.fp32-matmul-no-tf32"]
    assert findings[0].rule_id == "compute.fp32-matmul-no-tf32"
    steps = analysis.steps_in_window().count
    assert steps == REQUESTS["docqa"]
    predicted = sum(f.saving_ns for f in tf32) / steps
    assert 0.7 <= predicted / per_request_ns <= 1.3


@pytest.mark.parametrize("source", ["kineto", "captures"])
def test_goevals_leaf_loop_is_its_first_finding(source):
    """goeval evaluates each of a request's 32 leaves by a forward of its eight symmetric
    boards: the per-item finding names the net's forward, called 32 times a step, and is
    zym's first; the raw trace's spans of ``Net.forward``/``forward`` under ``evaluate``
    count the same (torch.profiler's trace)."""
    import polars as pl
    from zym.analysis import analyze
    from zym.rules import evaluate

    path = BLIND13 / source / "goeval.parquet"
    findings = evaluate(analyze(path))
    assert findings[0].rule_id == "compute.per-item-calls"
    assert "Net.forward" in findings[0].message
    assert findings[0].evidence["calls_per_step"] == workload_constant("goeval", "LEAVES")
    if source == "kineto":
        raw = pl.read_parquet(path, columns=["record", "stack_id", "frame_id", "name",
                                             "parent_id", "line"])
        frames = raw.filter(pl.col("record") == "frame").select("frame_id", "name", "line")
        stacks = raw.filter(pl.col("record") == "stack").select("stack_id", "frame_id",
                                                                "parent_id")
        spans = raw.filter(pl.col("record") == "span").select("stack_id")
        named = spans.join(stacks, on="stack_id").join(frames, on="frame_id")
        handles = named.filter(pl.col("name") == "handle").height
        # the net's own forward (its line in goeval.py), not its layers' forwards
        forwards = named.filter((pl.col("name") == "forward") & (pl.col("line") == 227)).height
        assert forwards == handles * workload_constant("goeval", "LEAVES")
