"""The blind round on the H200 (bench/whatif/results/h200-blind): workloads written before zym
saw them (vision, moe, detect), zym's findings on a capture and a torch.profiler trace of each
baseline, against every variant's measured saving (docs/benchmarks.md, "A blind round")."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from whatif_compare import check_docs_table, compare

ROOT = Path(__file__).resolve().parents[2]
BLIND = ROOT / "bench" / "whatif" / "results" / "h200-blind"
WORKLOADS = ROOT / "bench" / "whatif" / "workloads"
REQUESTS = {"vision": 8, "moe": 6, "detect": 6, "hf_generate": 4, "churn": 6}   # len(requests)


@pytest.fixture(scope="module")
def rows():
    return compare.compare(BLIND, REQUESTS)


def lines_matching(workload: str, pattern: str) -> list[int]:
    text = (WORKLOADS / f"{workload}.py").read_text().splitlines()
    return [i for i, line in enumerate(text, 1) if re.search(pattern, line)]


def constants(workload: str) -> dict[str, object]:
    """The workload's module-level constants, read from its source (no torch needed)."""
    import ast

    out = {}
    for node in ast.parse((WORKLOADS / f"{workload}.py").read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            names = [t.id for t in target.elts] if isinstance(target, ast.Tuple) else \
                [getattr(target, "id", None)]
            try:
                values = ast.literal_eval(node.value)
            except ValueError:
                continue
            values = values if isinstance(target, ast.Tuple) else (values,)
            out.update(zip(names, values, strict=True))
    return out


def findings_of(path: Path):
    from zym.analysis import analyze
    from zym.rules import evaluate

    result = analyze(path)
    return result, evaluate(result)


def line_of(site: str) -> int:
    return int(re.search(r":(\d+) ", site).group(1))


@pytest.mark.parametrize("source", ["captures/{w}.parquet", "kineto/{w}.trace.json.gz"])
@pytest.mark.parametrize("workload,pattern,loops", [
    ("moe", r"= torch\.nonzero\(", ("LAYERS", "EXPERTS")),
    ("detect", r"= (scores\[keep, c\]|boxes\[keep\])", ("IMAGES", "CLASSES")),
])
def test_size_reads_are_named_with_one_sync_per_loop_trip(source, workload, pattern, loops):
    """The lines whose op's output size depends on the data (found in the workload's source)
    are syncs.data-dependent-size findings, one sync per trip of the loops around them (the
    workload's constants) per step, and no scalar-read or copy finding claims those lines.
    Kineto sites name a function's first line: there the findings are checked by function."""
    c = constants(workload)
    trips = 1
    for name in loops:
        trips *= c[name]
    result, findings = findings_of(BLIND / source.format(w=workload))
    steps = result.steps_in_window().count
    want = lines_matching(workload, pattern)
    size = [f for f in findings if f.rule_id == "syncs.data-dependent-size"]
    assert size
    if source.startswith("captures"):   # exact lines
        assert sorted(line_of(f.site) for f in size) == want
    for f in size:
        assert f.evidence["syncs"] % (trips * steps) == 0, (f.site, f.evidence["syncs"])
    assert sum(f.evidence["syncs"] for f in size) == len(want) * trips * steps
    claimed = {f.site for f in size}
    for f in findings:
        if f.rule_id in ("syncs.scalar-readback", "syncs.dtoh-copy-sync"):
            assert f.site not in claimed, f.site


def test_every_variant_is_compared(rows):
    got = {(r.workload, r.source, r.variant) for r in rows}
    assert len({(w, s) for w, s, _ in got}) == 9   # hf_generate: no torch.profiler trace kept
    assert ("detect", "zym capture", "fixed_shapes") in got


def test_fixes_that_saved_nothing_get_no_finding_or_a_saving_inside_the_noise(rows):
    """torch.cuda.synchronize() after a pageable upload, TF32 for a CNN whose convolutions use
    TF32 already, TF32 for a launch-bound Hugging Face generate: nothing measurable, and zym
    claims nothing (or stays inside the noise)."""
    quiet = [r for r in rows if r.noise and r.variant in ("no_sync", "tf32")]
    assert len(quiet) == 5
    assert all(r.predicted_ms is None or r.agrees for r in quiet), quiet


def test_single_fixes_beyond_noise_are_found(rows):
    real = [r for r in rows if not r.noise and "+" not in r.rule_id]
    assert real and all(r.rank is not None for r in real), [r for r in real if r.rank is None]


def test_docs_table_is_what_the_captures_give_today(rows):
    check_docs_table("whatif-blind-table", rows, BLIND, REQUESTS)


def test_the_size_sync_estimate_removes_the_ops_own_calls():
    """The batch fix of syncs.data-dependent-size removes every CUDA call inside the op (its
    kernels, copy and sync) but those of the first trip per call of the function: on moe the
    calls under aten::nonzero counted from the capture's own stacks."""
    result, findings = findings_of(BLIND / "captures" / "moe.parquet")
    [f] = [f for f in findings if f.rule_id == "syncs.data-dependent-size"]
    calls = result.facts.calls
    ops = result.facts.site_of(calls["stack_id"], ("op_chain",))[0]
    in_window = calls["ts_ns"].is_between(*result.facts.window, closed="left")
    under = int((ops.str.contains(";aten::nonzero") & in_window).sum())
    assert f.evidence["count"] == under > 2 * f.evidence["syncs"]


def test_syncs_inside_transformers_name_the_users_generate_line():
    """The Hugging Face workload's syncs are transformers' own lines; each names the line of
    the workload that called generate (found in its source)."""
    [line] = lines_matching("hf_generate", r"self\.model\.generate\(")
    _, findings = findings_of(BLIND / "captures" / "hf_generate.parquet")
    inside = [f for f in findings if f.site.startswith("transformers/")]
    assert inside and all(f.called_from == f"workloads/hf_generate.py:{line} Service.handle"
                          for f in inside), [(f.site, f.called_from) for f in inside]
    own = [f for f in findings if f.site.startswith("workloads/")]
    assert own and all(f.called_from is None for f in own)


def test_capture_cost_is_stated_over_the_analyzed_window():
    """The header's share is the per-call estimate times the window's calls over the window
    (vision: ~14%), not the run-wide figure (0.12%: the target's start-up counted in)."""
    from zym.analysis import analyze
    from zym.analysis.export.summary import build_report
    from zym.rules import evaluate
    from zym.schemas import open_capture

    path = BLIND / "captures" / "vision.parquet"
    result = analyze(path)
    cost = build_report(result, evaluate(result), None)["capture"]["capture_cost"]
    calls = open_capture(path).load("call")
    lo, hi = result.window
    in_window = calls.filter((calls["ts_ns"] >= lo) & (calls["ts_ns"] < hi)).height
    assert cost["window_pct"] == round(100 * cost["total_ns_per_call"] * in_window
                                       / (hi - lo), 2)
    assert cost["window_pct"] > 50 * cost["estimated_overhead_pct"]


@pytest.mark.parametrize("capture", [
    BLIND / "captures" / "preproc.parquet",
    ROOT / "bench" / "nvtx" / "results" / "h200" / "ranges.parquet",
    ROOT / "bench" / "nvtx" / "results" / "h200" / "emit.parquet"])
def test_a_torch_models_layers_in_a_capture_are_no_items(capture):
    """zym captures (eBPF stacks) of steps that call a model whose identical layers run inside
    torch's frames (preproc's, and the NVTX workload's nn.TransformerEncoder): the run of torch's
    module wrapper repeats once per layer, but a frame not the user's own is never split into
    calls (without that, a per-item finding of "Module._wrapped_call_impl called 4 times" a
    step, 5 in preproc's)."""
    from zym.analysis import analyze
    from zym.rules import evaluate

    analysis = analyze(capture)
    assert analysis.steps_in_window() is not None and analysis.steps_in_window().count >= 4
    assert not [f for f in evaluate(analysis) if f.rule_id == "compute.per-item-calls"]
