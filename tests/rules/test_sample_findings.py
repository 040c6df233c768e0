"""The built-in packs on the real H200 trace of sample_traces/gpt_decode_server.py.

Expected: the .item() sync in generate, the .tolist() sync and the 16 per-row copies per call
in strip_padding, the pageable copies, and FeedForward's float32 matmuls as the slow hot path;
no finding at a line without such a problem. Costs are checked against sums computed here
straight from the trace JSON (its own durations), not through zym's tables.
"""
from __future__ import annotations

import ast
import bisect
import gzip
import json
from collections import defaultdict

import pytest
from zym import rules

SOURCE = "gpt_decode_server.py"


@pytest.fixture(scope="module")
def findings(sample_analysis):
    return rules.evaluate(sample_analysis)


@pytest.fixture(scope="module")
def raw(sample_trace):
    """The trace's events by category, durations in ns (as Kineto's µs floats, rounded)."""
    with gzip.open(sample_trace) as f:
        events = json.load(f)["traceEvents"]
    by = defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            e["ts_ns"] = round(e["ts"] * 1000)
            e["dur_ns"] = round(e.get("dur", 0) * 1000)
            by[e.get("cat")].append(e)
    return by


@pytest.fixture(scope="module")
def def_lines():
    """First line of each function of the workload (Kineto names frames by it)."""
    from pathlib import Path

    tree = ast.parse((Path(__file__).parents[2] / "sample_traces" / SOURCE).read_text())
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for f in node.body:
                if isinstance(f, ast.FunctionDef):
                    out[f"{node.name}.{f.name}"] = f.lineno
        elif isinstance(node, ast.FunctionDef) and node.col_offset == 0:
            out[node.name] = node.lineno
    return out


def one(findings, rule_id, site_part):
    hits = [f for f in findings if f.rule_id == rule_id and site_part in f.site]
    assert len(hits) == 1, [(f.rule_id, f.site) for f in findings]
    return hits[0]


def inside(spans, events):
    """Events (same thread) whose start lies inside one of ``spans``."""
    spans = sorted(spans, key=lambda s: s["ts_ns"])
    starts = [s["ts_ns"] for s in spans]
    out = []
    for e in events:
        i = bisect.bisect_right(starts, e["ts_ns"]) - 1
        if i >= 0 and e["ts_ns"] <= spans[i]["ts_ns"] + spans[i]["dur_ns"] \
                and e["tid"] == spans[i]["tid"]:
            out.append(e)
    return out


def builtin(raw, method):
    prefix = f"<built-in method {method} of Tensor object"  # Kineto appends " at 0x..."
    return [e for e in raw["python_function"] if e["name"].startswith(prefix)]


BLOCKING = ("cudaMemcpyAsync", "cudaStreamSynchronize")


def test_item_sync_in_generate(findings, raw, def_lines):
    f = one(findings, "syncs.scalar-readback", "generate")
    assert f.site == f"{SOURCE}:{def_lines['generate']} generate"
    ops = {e["args"]["External id"] for e in raw["cpu_op"] if e["name"] == "aten::_local_scalar_dense"}
    calls = [e for e in raw["cuda_runtime"] if e["args"].get("External id") in ops
             and e["name"] in BLOCKING]
    syncs = [e for e in calls if e["name"] == "cudaStreamSynchronize"]
    # .item() copies into pinned memory: the copy call does not block, the sync after it does
    pinned = {e["args"]["correlation"] for e in raw["gpu_memcpy"] if "Pinned" in e["name"]}
    assert all(e["args"]["correlation"] in pinned for e in calls if e not in syncs)
    assert f.evidence["syncs"] == len(syncs) == 80
    assert f.evidence["per_call"] == 8.0  # max_new_tokens
    assert f.evidence["stall_ns"] == sum(e["dur_ns"] for e in syncs)
    assert f.evidence["worst_stall_ns"] == max(e["dur_ns"] for e in syncs)
    assert f.occurrence_count == len(calls)
    assert {o["correlation_id"] for o in f.occurrences} == {e["args"]["correlation"] for e in calls}
    assert ".item()" in f.title
    assert f.user_chain[-1] == f.site and f.user_chain[0].endswith("<module>")


def test_tolist_sync_in_strip_padding(findings, raw, def_lines):
    f = one(findings, "syncs.dtoh-copy-sync", "strip_padding")
    assert f.site == f"{SOURCE}:{def_lines['strip_padding']} strip_padding"
    assert ".tolist()" in f.title
    calls = [e for e in inside(builtin(raw, "tolist"), raw["cuda_runtime"]) if e["name"] in BLOCKING]
    assert f.evidence["copies"] == f.evidence["syncs"] == 10
    assert f.evidence["per_call"] == 1.0
    assert f.evidence["stall_ns"] == sum(e["dur_ns"] for e in calls)


def test_sixteen_row_copies_per_strip_padding_call(findings, raw):
    f = one(findings, "transfers.repeated-small-dtoh", "strip_padding")
    assert ".cpu()" in f.title
    cpu_calls = inside(builtin(raw, "cpu"), raw["cuda_runtime"])
    copies = [e for e in cpu_calls if e["name"] == "cudaMemcpyAsync"]
    per_call = defaultdict(int)
    strip = [s for s in raw["python_function"] if s["name"].endswith("): strip_padding")]
    for c in copies:
        per_call[next(s["ts_ns"] for s in strip
                      if s["ts_ns"] <= c["ts_ns"] <= s["ts_ns"] + s["dur_ns"])] += 1
    assert set(per_call.values()) == {16} and len(per_call) == 10
    assert f.evidence["per_call"] == 16.0 and f.evidence["copies"] == len(copies) == 160
    assert f.evidence["stall_ns"] == sum(e["dur_ns"] for e in cpu_calls if e["name"] in BLOCKING)
    by_corr = {e["args"]["correlation"]: e for e in raw["gpu_memcpy"]}
    assert f.evidence["bytes"] == sum(by_corr[c["args"]["correlation"]]["args"]["bytes"]
                                      for c in copies)
    # The generic sync finding at this site is superseded by this more specific one.
    assert not [g for g in findings if g.rule_id == "syncs.dtoh-copy-sync" and ".cpu()" in g.title]


def test_pageable_copies(findings, raw, def_lines):
    pageable = [f for f in findings if f.rule_id == "transfers.pageable-memory"]
    sites = sorted(f.site for f in pageable)
    assert sites == sorted([f"{SOURCE}:{def_lines['strip_padding']} strip_padding"] * 2
                           + [f"{SOURCE}:{def_lines['handle_batch']} handle_batch"])
    corr = {e["args"]["correlation"] for e in raw["gpu_memcpy"] if "Pageable" in e["name"]}
    calls = [e for e in raw["cuda_runtime"] if e["args"].get("correlation") in corr]
    assert sum(f.evidence["copies"] for f in pageable) == len(corr) == 180
    assert sum(f.cost_ns for f in pageable) == sum(e["dur_ns"] for e in calls)


def test_ffn_float32_matmuls_are_the_slow_hot_path(findings, sample_analysis, raw, def_lines):
    """Found from the kernel names; the per-FLOP comparison with the fp16 attention
    projections (slow-matmul-path) charges the same kernels, so it is named, not repeated."""
    from zym.analysis.relations import Relations
    from zym.rules.engine import run_rule

    line = def_lines["FeedForward.forward"]
    fp32 = one(findings, "compute.fp32-matmul-no-tf32", "FeedForward.forward")
    assert fp32.site == f"{SOURCE}:{line} FeedForward.forward"
    assert [a.split(":")[0] for a in fp32.also] == ["compute.slow-matmul-path"]
    assert not [f for f in findings if f.rule_id == "compute.slow-matmul-path"]
    rule = next(r for p in rules.load_packs() for r in p.rules
                if r.id == "compute.slow-matmul-path")
    [slow] = run_rule(rule, Relations(sample_analysis))
    # Independently: kernels launched by aten::addmm ops with float inputs.
    float_ops = {e["args"]["External id"] for e in raw["cpu_op"] if e["name"] == "aten::addmm"
                 and e["args"].get("Input type", [None])[0] == "float"}
    corr = {e["args"]["correlation"] for e in raw["cuda_runtime"] + raw["cuda_driver"]
            if e["args"].get("External id") in float_ops}
    ffn_ns = sum(k["dur_ns"] for k in raw["kernel"] if k["args"]["correlation"] in corr)
    assert slow.evidence["gpu_ns"] == fp32.evidence["gpu_ns"] == ffn_ns
    total = sum(k["dur_ns"] for cat in ("kernel", "gpu_memcpy", "gpu_memset") for k in raw[cat])
    assert slow.evidence["share"] == pytest.approx(ffn_ns / total)
    assert slow.evidence["slowdown"] > 5  # vs the fp16 attention projections
    assert not [f for f in findings if f.rule_id == "compute.slow-matmul-path" and f is not slow]


def test_no_finding_points_at_a_line_without_the_problem(findings, def_lines):
    allowed = {
        "syncs.scalar-readback": {"generate"},
        "syncs.dtoh-copy-sync": {"strip_padding"},
        "transfers.repeated-small-dtoh": {"strip_padding"},
        "transfers.pageable-memory": {"strip_padding", "handle_batch"},  # .cpu/.tolist, .to(dev)
        "compute.slow-matmul-path": {"FeedForward.forward"},
        "compute.fp32-matmul-no-tf32": {"FeedForward.forward"},
        # 3 gaps of ~60 ms: cuDNN builds an attention plan for each new sequence length.
        "utilization.idle-before-launch": {"Attention.forward"},
    }
    for f in findings:
        if f.site == "(whole window)":
            assert f.rule_id == "utilization.low-utilization"
            continue
        if f.site.startswith("each step: "):  # a finding about the repeated step
            assert f.rule_id == "compute.launch-bound-step"
            assert f.site == f"each step: {SOURCE} handle_batch"
            continue
        function = f.site.split(" ", 1)[1]
        assert function in allowed.get(f.rule_id, set()), (f.rule_id, f.site)
        assert f.site == f"{SOURCE}:{def_lines[function]} {function}"
    fired = {f.rule_id for f in findings}
    assert fired >= set(allowed) - {"utilization.idle-before-launch", "compute.slow-matmul-path"}
    # The Attention gaps are the CPU inside the cuDNN attention op itself, not elsewhere.
    for f in findings:
        if f.rule_id == "utilization.idle-before-launch":
            assert f.evidence["in_op_share"] > 0.9 and "_cudnn_attention" in f.message


def test_findings_rank_by_saving_and_serialize(findings, sample_analysis):
    """Estimated savings first, largest first, down to a noise floor (0.1% of the window, at
    least 1 us); then findings without an estimate, by what they observed; then those whose
    fix saves less than the floor. The incremental savings add up to the total of all fixes
    replayed at once."""
    floor = max(1_000, sample_analysis.facts.window_ns // 1_000)
    gains = [f for f in findings if f.saving_ns is not None and f.saving_ns >= floor]
    rest = [f for f in findings if f.saving_ns is None]
    small = [f for f in findings if f.saving_ns is not None and f.saving_ns < floor]
    assert gains and small and rest   # the sample has all three (small: pageable copies)
    assert list(findings) == gains + rest + small
    for part in (gains, small):
        assert [f.saving_ns for f in part] == sorted((f.saving_ns for f in part), reverse=True)
    assert [f.cost_ns for f in rest] == sorted((f.cost_ns for f in rest), reverse=True)
    assert sum(f.saving_incremental_ns or 0 for f in findings) == findings.total_ns
    d = findings[0].to_dict()
    assert {"rule_id", "severity", "title", "message", "site", "user_chain", "evidence", "fix",
            "examples", "occurrence_count", "saving_ns", "saving_how",
            "saving_incremental_ns"} <= set(d)
    json.dumps([f.to_dict() for f in findings])


def test_parquet_capture_gives_the_same_findings(sample_capture, findings):
    from zym.analysis import analyze

    again = rules.evaluate(analyze(sample_capture))
    assert [(f.rule_id, f.site, f.evidence) for f in again] == \
           [(f.rule_id, f.site, f.evidence) for f in findings]


def test_dropping_rows_early_changes_no_finding(sample_analysis, findings):
    """Relations keep only rows some rule may keep (relaxed filters); the same rules on the
    whole relations give the same groups and measures."""
    from zym.analysis.relations import Relations
    from zym.rules.engine import _fits_gpus, _plan, rule_columns

    rel = Relations(sample_analysis)
    full = []
    for pack in rules.load_packs(plugins=False):
        for rule in pack.rules:
            if not _fits_gpus(rule.gpus, sample_analysis):   # the sample's H200: TF32
                continue
            frame = rel.materialize(rule.relation, rule_columns(rule), None)
            grouped = _plan(rule, rel, frame)["grouped"].collect()
            full += [(rule.id, row["count"]) for row in grouped.iter_rows(named=True)]
    rows_with_early_drop = {(f.rule_id, f.evidence["count"]) for f in findings}
    superseded = {("syncs.dtoh-copy-sync", 320),  # the .cpu() path: see transfers
                  ("compute.slow-matmul-path", 1280)}  # the fp32 kernels: see fp32-matmul
    assert set(full) - superseded == rows_with_early_drop
