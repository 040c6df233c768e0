"""Fixes replayed on a sample of a long window (zym.analysis.sample): which runs are chosen,
how a fix's edits are carried onto a half of the sample, that a "sample" of the whole window
replays exactly as the full timeline, and that on a capture with thousands of syncs the
sampled estimates scatter around the full replay's without a bias."""
from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from synthetic import make_synthetic
from zym.analysis import analyze
from zym.analysis import sample as S
from zym.analysis.replay import Fix
from zym.rules import evaluate, load_packs
from zym.rules.findings import Findings

REPO = Path(__file__).resolve().parents[2]
EBPF_SAMPLE = REPO / "sample_traces" / "gpt_decode_server.parquet"


def test_below_the_threshold_or_switched_off_nothing_is_sampled():
    starts = np.arange(0, 1000, 10, dtype=np.int64)
    assert S.choose_sample((0, 1000), 100, starts, threshold=1_000) is None
    assert S.choose_sample((0, 1000), 10**9, starts, threshold=None) is None
    # a sample of half the window or more: the whole window is replayed
    assert S.choose_sample((0, 1000), 1_000, starts, threshold=1, budget=600, runs=4) is None


def test_runs_are_whole_steps_spread_evenly_through_the_window():
    n = 1000
    starts = np.sort(np.random.default_rng(3).choice(10**7, n, replace=False)).astype(np.int64)
    hi = 10**7 + 5
    s = S.choose_sample((int(starts[0]), hi), 10**6, starts, threshold=1, budget=80_000, runs=8)
    assert s is not None and len(s.ranges) == 8
    bounds = list(starts) + [hi]
    per_run = round(0.08 * n / 8)
    firsts = []
    for t0, t1 in s.ranges:
        i = bounds.index(t0)  # a run starts at a step's start and ends at a later one's
        assert bounds[i + per_run] == t1
        firsts.append(i)
    assert firsts == sorted(firsts) and all(b - a >= per_run for a, b in pairwise(firsts))
    assert firsts[0] < n / 8 and firsts[-1] > n * 7 / 8  # from the start to the end
    assert s.steps == 8 * per_run and s.of_steps == n
    assert s.sampled_ns == sum(t1 - t0 for t0, t1 in s.ranges)
    assert s.half_ns(0) + s.half_ns(1) == s.sampled_ns


def test_without_steps_the_runs_are_equal_slices_of_time():
    s = S.choose_sample((1_000, 101_000), 10**6, None, threshold=1, budget=100_000, runs=4)
    widths = [t1 - t0 for t0, t1 in s.ranges]
    assert len(s.ranges) == 4 and max(widths) - min(widths) <= 1
    assert abs(sum(widths) - 10_000) <= 4  # a tenth of the window
    assert all(b[0] >= a[1] for a, b in pairwise(s.ranges))
    assert s.steps == 0
    # a few long steps: no run of whole steps is a small part of the window
    assert S.choose_sample((0, 100), 10**6, np.array([0, 50]), threshold=1, budget=1) is None


def test_a_fix_carried_onto_a_half_keeps_the_edits_of_its_rows():
    rng = np.random.default_rng(11)
    n_calls, n_ops = 500, 400
    keep_c, keep_g = rng.random(n_calls) < 0.4, rng.random(n_ops) < 0.5
    cm, gm = S._renumber(keep_c), S._renumber(keep_g)
    calls = np.sort(rng.choice(n_calls, 60, replace=False))
    ops = np.sort(rng.choice(n_ops, 50, replace=False))
    first = np.sort(rng.choice(n_calls - 10, 8, replace=False))
    last = first + rng.integers(0, 10, 8)
    fix = Fix(remove_calls=calls[:10], unblock_calls=calls[10:20], cost_calls=calls[20:40],
              cost_ns=rng.integers(0, 1000, 20), gap_calls=calls[40:], gap_ns=rng.integers(
                  0, 1000, 20), gpu_ops=ops, gpu_dur_ns=rng.integers(0, 1000, 50),
              graph_first=first, graph_last=last, graph_launch_ns=rng.integers(1, 9, 8),
              graph_node_ns=7, describe="d")
    got = S._map_fix(fix, cm, gm)
    pos_c = {int(i): k for k, i in enumerate(np.flatnonzero(keep_c))}
    pos_g = {int(i): k for k, i in enumerate(np.flatnonzero(keep_g))}
    assert got.remove_calls.tolist() == [pos_c[i] for i in calls[:10].tolist() if i in pos_c]
    assert got.unblock_calls.tolist() == [pos_c[i] for i in calls[10:20].tolist() if i in pos_c]
    want = [(pos_c[i], v) for i, v in zip(calls[20:40].tolist(), fix.cost_ns.tolist())
            if i in pos_c]
    assert list(zip(got.cost_calls.tolist(), got.cost_ns.tolist())) == want
    want = [(pos_g[i], v) for i, v in zip(ops.tolist(), fix.gpu_dur_ns.tolist()) if i in pos_g]
    assert list(zip(got.gpu_ops.tolist(), got.gpu_dur_ns.tolist())) == want
    whole = [(pos_c[a], pos_c[b], ln) for a, b, ln in zip(first.tolist(), last.tolist(),
                                                          fix.graph_launch_ns.tolist())
             if all(i in pos_c for i in range(a, b + 1))]
    assert list(zip(got.graph_first.tolist(), got.graph_last.tolist(),
                    got.graph_launch_ns.tolist())) == whole
    assert got.graph_node_ns == 7 and got.describe == "d"


def _findings(analysis) -> Findings:
    return evaluate(analysis, load_packs(()), ())


RESULTS = REPO / "bench" / "whatif" / "results"
WHOLE_WINDOW = [EBPF_SAMPLE,  # and H200 inputs of other shapes: a monitor thread beside the
                # steps, a pool of workers, a 17-finding capture
                RESULTS / "h200-threads" / "sidecar.capture.parquet",
                RESULTS / "h200-varied" / "pooled.trace.json.gz",
                RESULTS / "h200-blind" / "captures" / "hf_generate.parquet"]


@pytest.mark.parametrize("path", WHOLE_WINDOW, ids=lambda p: p.name)
def test_a_sample_of_the_whole_window_replays_as_the_full_timeline(path, monkeypatch):
    """One half holding every call and operation: every finding's own replay, the chained
    replays and the fixes together give the full timeline's nanoseconds (the rows renumbered,
    the edits carried over, a chain replayed where it differs from its last link). (All 29
    H200 captures and traces under bench/whatif/results did, once.)"""
    full = analyze(path, None, "steady")
    want = _findings(full)
    assert any(f.saving_ns for f in want)
    lo, hi = full.window
    whole = S.Sample(((lo, hi), (hi, hi)), 0, 0, hi - lo)
    monkeypatch.setattr(S, "choose_sample", lambda *a, **k: whole)
    monkeypatch.setenv(S.ENV_SAMPLE, "1")
    sampled = analyze(path, None, "steady")
    assert isinstance(sampled.timeline, S.SampledTimeline)
    assert sampled.timeline.halves[0].n_calls == full.timeline.n_calls
    got = _findings(sampled)
    assert [(f.rule_id, f.site, f.saving_ns, f.saving_incremental_ns) for f in got] == \
        [(f.rule_id, f.site, f.saving_ns, f.saving_incremental_ns) for f in want]
    assert got.total_ns == want.total_ns
    assert sampled.timeline.fidelity == full.timeline.fidelity
    # the window without the recording's cost (the CPU-bound rule's bare steps), read
    # without the replays that keep that cost in
    assert sampled.timeline.uninstrumented_ns == full.timeline.uninstrumented_ns \
        == full.timeline.fidelity["uninstrumented_ns"]
    # what the fix models read of every call: the full window's, without its timeline
    assert np.array_equal(sampled.timeline.gap, full.timeline.gap)
    assert np.array_equal(sampled.timeline.waits, full.timeline.waits)
    assert sampled.timeline.usable and sampled.timeline.n_calls == full.timeline.n_calls
    for f in got:
        if f.edit is not None and f.saving_ns is not None:
            assert "replayed on" in f.saving_how and sampled.timeline.spread(f.edit) is not None


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    return make_synthetic(60_000, tmp_path_factory.mktemp("synthetic") / "s.parquet")


def test_sampled_estimates_scatter_around_the_full_replay(synthetic, monkeypatch):
    """A quarter of a window with thousands of syncs, in 16 runs: the fixes together within
    10% of the full replay's, each finding's estimate without a bias (median ratio near 1;
    on this small capture each finding's estimate scatters widely: 0.58-1.89 of the full
    one, 10th-90th percentile, with 15 k operations sampled), and the halves' figures
    bracketing the full one for a fair share of the findings (45 of 79 here)."""
    full = analyze(synthetic, None, "steady")
    ranked = _findings(full)
    want = {(f.rule_id, f.site): f for f in ranked}
    monkeypatch.setenv(S.ENV_SAMPLE, "1")
    monkeypatch.setattr(S, "SAMPLE_EVENTS", (full.facts.calls.height + full.facts.gpu.height) // 4)
    sampled = analyze(synthetic, None, "steady")
    assert isinstance(sampled.timeline, S.SampledTimeline)
    got = _findings(sampled)
    assert got.total_ns and abs(got.total_ns - ranked.total_ns) <= 0.1 * ranked.total_ns
    ratios, inside = [], 0
    for f in got:
        w = want.get((f.rule_id, f.site))
        if w is None or not w.saving_ns or f.saving_ns is None:
            continue
        ratios.append(f.saving_ns / w.saving_ns)
        a, b = sorted(sampled.timeline.spread(f.edit))
        inside += a <= w.saving_ns <= b
    assert len(ratios) >= 20
    assert 0.9 <= float(np.median(ratios)) <= 1.15
    assert inside >= len(ratios) // 4


@pytest.mark.parametrize("value", ["some", "-1", "1.5"])
def test_a_bad_sample_setting_is_one_line_and_exit_2(value):
    import os

    from console import error_line, typer_app

    run = typer_app("analyze", str(EBPF_SAMPLE), env={**os.environ, S.ENV_SAMPLE: value})
    assert error_line(run) == (
        f"zym: error: ZYM_REPLAY_SAMPLE={value!r}: give 'all' (replay every step) or a "
        "number of calls and GPU operations from which fixes are replayed on a sample")


def test_what_if_and_cuda_graphs_on_a_whole_window_sample_are_the_full_replays(monkeypatch):
    """``--what-if`` specs (a finding's fix, a fix model at a line, kernels sped up, every
    step's launches as CUDA graphs: the edit kinds the rules do not all make) give the full
    timeline's savings when the sample's one half is the whole window."""
    from zym.rules.whatif import what_if

    full = analyze(EBPF_SAMPLE, None, "steady")
    specs = ["1", "all", "speedup@.*gemm.*=2x", "cuda-graph@steps",
             "shorten-gaps@gpt_decode_server.py:96", "batch@gpt_decode_server.py:87"]
    want = what_if(full, _findings(full), specs)
    lo, hi = full.window
    monkeypatch.setattr(S, "choose_sample",
                        lambda *a, **k: S.Sample(((lo, hi), (hi, hi)), 0, 0, hi - lo))
    monkeypatch.setenv(S.ENV_SAMPLE, "1")
    sampled = analyze(EBPF_SAMPLE, None, "steady")
    got = what_if(sampled, _findings(sampled), specs)
    assert isinstance(sampled.timeline, S.SampledTimeline)
    assert [r["saving_ns"] for r in want["specs"]] == [r["saving_ns"] for r in got["specs"]]
    assert got["saving_ns"] == want["saving_ns"]
    assert sum(1 for r in want["specs"] if r["saving_ns"]) >= 3


def test_the_reports_say_the_fixes_were_replayed_on_a_sample(monkeypatch):
    """JSON carries ``replay.sample``; the text and markdown reports and the HTML summary say
    how the fixes were replayed; every estimate gives its halves."""
    import io

    from rich.console import Console
    from zym.analysis.export.html_report import _summary_html
    from zym.analysis.export.summary import build_report
    from zym.cli.render import render_findings, render_markdown

    full = analyze(EBPF_SAMPLE, None, "steady")
    lo, hi = full.window
    monkeypatch.setattr(S, "choose_sample",
                        lambda *a, **k: S.Sample(((lo, hi), (hi, hi)), 0, 0, hi - lo))
    monkeypatch.setenv(S.ENV_SAMPLE, "1")
    sampled = analyze(EBPF_SAMPLE, None, "steady")
    report = build_report(sampled, _findings(sampled), None, 0)
    assert report["replay"]["sample"] == {"runs": 2, "steps": 0, "of_steps": 0,
                                          "of_capture_sample": False,
                                          "sampled_ns": hi - lo, "window_ns": hi - lo,
                                          "sampled_pct": 100.0}
    out = io.StringIO()
    render_findings(report, Console(file=out, width=100))
    line = "each fix replayed on 100% of its time (2 runs spread evenly, in two halves)"
    assert line in " ".join(out.getvalue().split())
    assert "each fix replayed on 100% of its time \\(2 runs" in render_markdown(report)
    assert line in _summary_html(report)
    assert all("(replayed on 100% of its time in 2 runs and scaled to the window: its two "
               "halves give" in f["saving_how"] for f in report["findings"]
               if f["saving_ns"] is not None)
    assert all(len(f["saving_halves_ns"]) == 2 for f in report["findings"]
               if f["saving_ns"] is not None)


def test_each_fixs_spread_is_its_own(monkeypatch):
    """What each half gives is kept with the fix it was replayed for: a fix this timeline has
    not replayed (an empty one, or one made after another was freed, which may take its id)
    has none; one replayed by another timeline has none here."""
    import gc

    from zym.analysis.replay import Fix

    full = analyze(EBPF_SAMPLE, None, "steady")
    lo, hi = full.window
    halves = S.Sample(((lo, (lo + hi) // 2), ((lo + hi) // 2, hi)), 0, 0, hi - lo)
    monkeypatch.setattr(S, "choose_sample", lambda *a, **k: halves)
    monkeypatch.setenv(S.ENV_SAMPLE, "1")
    tl = analyze(EBPF_SAMPLE, None, "steady").timeline
    other = analyze(EBPF_SAMPLE, None, "steady").timeline
    waits = np.flatnonzero(tl.waits)
    assert len(waits) >= 2
    fix = Fix(remove_calls=waits[:1].astype(np.int64))
    saving = tl.saving(fix, alone=True)
    a, b = tl.spread(fix)
    # each half's figure scaled by its time: together, the saving (rounding apart)
    assert abs(saving - (a * halves.half_ns(0) + b * halves.half_ns(1)) / (hi - lo)) <= 2
    assert other.spread(fix) is None
    assert tl.spread(Fix()) is None and tl.saving(Fix()) == 0
    for _ in range(50):  # a later fix, perhaps at the freed one's address
        gone = Fix(remove_calls=waits[1:2].astype(np.int64))
        tl.saving(gone, alone=True)
        address = id(gone)
        del gone
        gc.collect()
        later = Fix()
        assert tl.spread(later) is None
        if id(later) == address:
            break
