"""A long torch.profiler trace whose traffic drifts over the capture, recorded on an H100 and
kept as the capture `zym import` made of it (bench/whatif/workloads/drift.py,
bench/whatif/device_drift_fix.sh): small batches, then mixed, then large, every batch size
several times, and two rare lines that read the GPU back.
Sampled to a tenth and to three tenths of its rows (``zym analyze --memory-budget``), its
analysis must say what the whole says: the launch-bound steps' saving, and every line that
syncs or copies, named by a finding or as outside the sample with the capture's counts."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from zym.analysis import analyze
from zym.analysis import budget as B
from zym.analysis.export.summary import build_report
from zym.rules import evaluate, load_packs
from zym.schemas.io import open_capture

ROOT = Path(__file__).resolve().parents[2]
DRIFT = ROOT / "bench" / "whatif" / "results" / "h100-drift" / "drift.parquet"
WORKLOAD = ROOT / "bench" / "whatif" / "workloads" / "drift.py"


def _constants() -> dict[str, int]:
    """The workload's own constants (how often each rare line runs), read from its source
    (it imports torch)."""
    tree = ast.parse(WORKLOAD.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple):
            for name, value in zip(node.targets[0].elts, node.value.elts, strict=True):
                out[name.id] = ast.literal_eval(value)
    return out


def _traced(every: int) -> int:
    """How often a line run every ``every``-th request ran in the trace: the harness served
    one pass (REQUESTS) before tracing one more, counting on."""
    n = _constants()["REQUESTS"]
    return (2 * n) // every - n // every


def _report(path: Path, budget: int | None) -> dict:
    a = analyze(path, budget=budget)
    return build_report(a, evaluate(a, load_packs(()), ()), None, 0, None)


@pytest.mark.parametrize("fraction", [0.3, 0.1])
def test_a_sample_of_a_drifting_trace_says_what_the_whole_says(fraction):
    capture = DRIFT
    cap = open_capture(capture)
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    whole = _report(capture, None)
    part = _report(capture, B.estimate_bytes({t: n * fraction for t, n in rows.items()}))
    assert "sample" not in whole and part["sample"]["fraction"] < fraction + 0.01

    def launch_bound(report):
        (f,) = [f for f in report["findings"] if f["rule_id"] == "compute.launch-bound-step"]
        return f["saving_ns"] / report["gpu"]["window_ns"]

    # every batch size comes back several times in the trace, most held once in the sample:
    # graphs are replayed where the capture repeats a step's shapes (10.9% and 10.8% of the
    # window against 11.9% whole; 7.7% and 6.5% when only repeats within the sample counted)
    assert launch_bound(part) == pytest.approx(launch_bound(whole), rel=0.15)
    # every line that syncs or copies in the whole's findings is a finding's site in the
    # sample's report or named outside its sample, with the capture's counts
    lines = part["sample"]["sync_copy_lines"]
    outside = {x["function"]: x for x in lines["outside"]}
    named = {f["site"].split(" ")[-1] for f in part["findings"] if f.get("site")}
    wanted = {f["site"].split(" ")[-1] for f in whole["findings"]
              if f["rule_id"].startswith(("syncs.", "transfers."))}
    assert {"snapshot", "log_metrics"} <= wanted
    assert wanted <= named | set(outside)
    # the rare lines, counted from the workload's source: each a copy to the host and its sync
    every = _constants()
    for function, key in (("snapshot", "SNAPSHOT_EVERY"), ("log_metrics", "LOG_EVERY")):
        if function in outside:
            x = outside[function]
            assert (x["syncs"], x["copies"]) == (_traced(every[key]),) * 2
    assert "snapshot" in outside  # 2 runs, 0.3% of the requests: outside both samples
