"""`zym capture --shapes` on the H200 (bench/shapes/results/h200, from bench/shapes/device_shapes.sh):
bench/shapes/matmul_service.py runs its matmuls four ways, one line each. With operator shapes the
rules that size matmuls fire on zym's own capture, at the exact lines; without them they cannot;
torch.profiler's trace of the same workload (record_shapes) is the peer's view.

Independent of zym: the lines come from the workload's source; the per-FLOP slowdown is computed
here from the Kineto trace's raw kernel durations and the shapes the source gives (a different
run of the same workload, so within a tolerance).
"""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from zym import rules
from zym.analysis import analyze

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "bench" / "shapes" / "results" / "h200"
SOURCE = REPO / "bench" / "shapes" / "matmul_service.py"


def line_of(pattern: str) -> int:
    lines = SOURCE.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if re.search(pattern, text))


def site(pattern: str) -> str:
    return f"matmul_service.py:{line_of(pattern)} Scorer.forward"


def findings_of(name: str) -> list[tuple[str, str]]:
    path = H200 / name
    if not path.exists():
        pytest.fail(f"{path} is missing (committed with bench/shapes)")
    return rules.evaluate(analyze(path))


HEAD, RESCORE, ODD = (r"^\s+logits = self\.head\(", r"^\s+score = logits\.double\(\) @",
                      r"^\s+extra = h\[.*\] @ self\.odd_w")


def test_with_shapes_every_matmul_rule_fires_at_its_line():
    got = {(f.rule_id, f.site.rsplit("/", 1)[-1]) for f in findings_of("matmul-shapes.parquet")}
    assert got == {("compute.fp32-matmul-no-tf32", site(HEAD)),
                   ("compute.slow-matmul-path", site(RESCORE)),
                   ("compute.slow-matmul-path", site(ODD)),
                   ("compute.fp16-unaligned-matmul", site(ODD))}


def test_without_shapes_only_the_kernel_name_rule_can():
    """Of the rules that size matmuls (the compute pack's), only the one that reads kernel
    names fires. (Since the fifty-second round the CPU-bound rule also finds the ~0.15 ms a
    step this capture's CPU spends between the harness's sync and the step's first launch,
    11% of its steps, with the GPU idle: not a matmul finding.)"""
    got = {(f.rule_id, f.site.rsplit("/", 1)[-1]) for f in findings_of("matmul-plain.parquet")
           if f.rule_id.startswith("compute.")}
    assert got == {("compute.fp32-matmul-no-tf32", site(HEAD))}


def test_the_kineto_trace_of_the_workload_has_the_same_rules():
    """torch.profiler names a function's first line, so every matmul lands on ``def forward``,
    where the fp32 finding supersedes the slow-path one; the rules themselves are the same."""
    got = {(f.rule_id, f.site.rsplit("/", 1)[-1]) for f in findings_of("matmul.trace.json.gz")
           if f.rule_id.startswith("compute.")}
    forward = f"matmul_service.py:{line_of(r'def forward[(]')} Scorer.forward"
    assert got == {("compute.fp32-matmul-no-tf32", forward),
                   ("compute.fp16-unaligned-matmul", forward)}


def _kineto_ns_per_flop(prefix: str, flops: int) -> float:
    with gzip.open(H200 / "matmul.trace.json.gz") as f:
        events = json.load(f)["traceEvents"]
    durs = [e["dur"] for e in events if e.get("cat") == "kernel" and e["name"].startswith(prefix)]
    assert durs, prefix
    return sum(durs) / len(durs) * 1e3 / flops


def test_the_slowdown_matches_the_raw_kernel_times():
    d, tokens = 4096, 1024                       # the workload's sizes (matmul_service.py)
    bf16 = _kineto_ns_per_flop("nvjet_sm90", 2 * tokens * d * d)            # proj: addmm
    fp64 = _kineto_ns_per_flop("sm90_xmma_gemm_f64f64", 2 * tokens * d * 1024)  # rescore
    (f,) = [f for f in findings_of("matmul-shapes.parquet")
            if f.rule_id == "compute.slow-matmul-path" and f.site.endswith(site(RESCORE))]
    assert f.measures["slowdown"] == pytest.approx(fp64 / bf16, rel=0.15)
    assert f.measures["flops"] == 2 * tokens * d * 1024 * f.measures["count"]
