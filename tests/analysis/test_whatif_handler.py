"""A sync at the top of a request handler, on the H200: what removing it saves, predicted
against measured (bench/whatif/workloads/timed_handler.py; results in
bench/whatif/results/h200-handler/: its torch.profiler trace and 21 interleaved rounds of the
baseline and the variant without that sync)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "whatif" / "results" / "h200-handler"


def test_the_handler_s_first_sync_saves_what_the_h200_measured_not_the_parsing_before_it():
    from zym.analysis import analyze
    from zym.rules import evaluate

    measured = json.loads((RESULTS / "timed_handler.measure.json").read_text())
    base = measured["variants"]["base"]["times_s"]
    fixed = measured["variants"]["no_top_sync"]["times_s"]
    requests = 16  # a pass: the workload's make_requests() default
    # Per request, the paired rounds' upper quartile of what the variant saved (noise included)
    upper = statistics.quantiles([b - f for b, f in zip(base, fixed)], n=4)[2] / requests
    analysis = analyze(RESULTS / "timed_handler.trace.json.gz")
    [f] = [f for f in evaluate(analysis) if f.rule_id == "syncs.explicit-sync-in-loop"]
    per_request = f.saving_ns / f.evidence["instances"]
    assert 0 < per_request * 1e-9 <= upper  # the syncs' own time: ~20 µs, not ~20 ms of parsing
    assert "the first call of their enclosing call" in f.saving_how
