"""`zym analyze` in a memory budget: a capture whose analysis would not fit is analysed on a
sample of its time (zym.analysis.budget)."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from synthetic import BATCH, SERVE, decode_server
from zym.analysis import analyze
from zym.analysis import budget as B
from zym.analysis.export.summary import build_report, capture_sample_line
from zym.rules import evaluate, load_packs
from zym.rules.testing import CaptureBuilder
from zym.schemas.integrity import HASH_KEY, HASH_PLACEHOLDER, seal
from zym.schemas.io import open_capture


def _source_rows(path):
    """The calls, GPU operations and spans of a capture, read with pyarrow (not zym's
    reader): per table, its rows in file order (``pid``, ``ts_ns``, ``correlation_id``)."""
    rows = pq.read_table(path, columns=["record", "pid", "ts_ns", "correlation_id"]).to_pylist()
    return {k: [r for r in rows if r["record"] == k] for k in ("call", "gpu", "span")}


def test_the_whole_capture_when_it_fits(tmp_path):
    path = decode_server(tmp_path / "c.parquet", requests=40)
    assert B.plan(open_capture(path), 1 << 40) is None
    whole, budgeted = analyze(path), analyze(path, budget=1 << 40)
    assert budgeted.sample is None and "sample" not in budgeted.to_dict()
    assert whole.to_dict() == budgeted.to_dict()


def test_the_fraction_is_the_largest_whose_estimate_fits():
    from zym.analysis.instances import JIT_MIN_CALLS

    first, upto, rest = B.ROW_COST["events"]
    rows = {"call": 1_000_000, "gpu": 800_000, "span": 0}
    fixed = B.FIXED_BYTES + B.NUMBA_BYTES  # (the sample holds more calls than numba's floor)
    budget = fixed + 500 * (1 << 20)
    # below the first ``upto`` events the estimate is linear: solved directly
    exact = (budget - fixed) / (B.HEADROOM * first * 1_800_000)
    assert exact * rows["call"] >= JIT_MIN_CALLS
    f = B.fitting_fraction(rows, budget)
    assert abs(f - exact) < 1e-4
    assert B.estimate_bytes({t: n * f for t, n in rows.items()}) <= budget
    assert B.estimate_bytes({t: n * (f + 1e-3) for t, n in rows.items()}) > budget
    # numba's part only where the analysis holds enough calls to load it
    few = {"call": JIT_MIN_CALLS - 1, "gpu": 0}
    assert B.estimate_bytes(few) == int(B.FIXED_BYTES + B.HEADROOM * first * few["call"])
    assert B.estimate_bytes({"call": JIT_MIN_CALLS}) == int(
        fixed + B.HEADROOM * first * JIT_MIN_CALLS)
    # past ``upto`` events each costs ``rest``
    big = {"call": 6_000_000, "gpu": 4_000_000}
    assert B.estimate_bytes(big) == int(fixed + B.HEADROOM * (
        first * upto + rest * (10_000_000 - upto)))
    assert B.fitting_fraction(big, 1) == B.MIN_FRACTION  # nothing fits: the least is read


REPO = Path(__file__).parents[2]


def _capture(kind: str, tmp_path: Path) -> Path:
    """A capture to sample: the builder's server, the bundled zym capture (eBPF + CUPTI on the
    H200), or the bundled torch.profiler trace imported (with its spans)."""
    if kind == "builder":
        return decode_server(tmp_path / "c.parquet")
    if kind == "bundled capture":
        return REPO / "sample_traces" / "gpt_decode_server.parquet"
    from zym.capture.kineto import import_kineto

    return import_kineto(REPO / "sample_traces" / "gpt_decode_server.trace.json.gz",
                         tmp_path / "trace.parquet")


@pytest.mark.parametrize("kind", ["builder", "bundled capture", "bundled trace"])
def test_the_sample_is_every_call_of_its_slices_with_its_gpu_work(tmp_path, kind):
    path = _capture(kind, tmp_path)
    cap = open_capture(path)
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    sample = B.plan(cap, B.estimate_bytes({t: n * 0.3 for t, n in rows.items()}))
    assert sample is not None and 0.25 < sample.fraction < 0.35
    assert len(sample.slices) == B.SLICES
    sample = B.write_sample(cap, sample, tmp_path / "s.parquet")
    src, got = _source_rows(path), _source_rows(tmp_path / "s.parquet")

    def slice_of(ts: int) -> int | None:
        return next((k for k, (a, b) in enumerate(sample.slices) if a <= ts < b), None)

    calls = [r for r in src["call"] if slice_of(r["ts_ns"]) is not None]
    keys = {(r["pid"], r["correlation_id"]): r for r in calls}
    gpu = [r for r in src["gpu"] if (r["pid"], r["correlation_id"]) in keys]
    # spans start in a slice, or before the first (a step or request opens before its calls)
    spans = [r for r in src["span"] if slice_of(r["ts_ns"]) is not None
             or r["ts_ns"] < sample.slices[0][1]]
    assert len(got["call"]) == len(calls) == sample.sample_rows["call"] > 0
    assert len(got["gpu"]) == len(gpu) == sample.sample_rows["gpu"] > 0
    assert len(got["span"]) == len(spans) == sample.sample_rows["span"]
    if kind == "bundled trace":
        assert spans
    # each slice is shifted as one (every call and GPU operation of it by the same amount),
    # and the slices follow one another in the sample's clock
    shifts: dict[int, set] = {}
    starts: dict[int, list] = {}
    for table, source in (("call", keys), ("gpu", {(r["pid"], r["correlation_id"]): r
                                                   for r in gpu})):
        for r in got[table]:
            was = source[(r["pid"], r["correlation_id"])]
            k = slice_of(keys[(r["pid"], r["correlation_id"])]["ts_ns"])
            shifts.setdefault(k, set()).add(r["ts_ns"] - was["ts_ns"])
            if table == "call":
                starts.setdefault(k, []).append(r["ts_ns"])
    assert all(len(v) == 1 for v in shifts.values()), shifts
    order = sorted(starts)
    assert all(max(starts[a]) < min(starts[b]) for a, b in itertools.pairwise(order))


def test_a_sampled_analysis_says_what_the_whole_says(tmp_path):
    path = decode_server(tmp_path / "c.parquet")
    cap = open_capture(path)
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    budget = B.estimate_bytes({t: n * 0.3 for t, n in rows.items()})
    packs = load_packs(())
    reports = []
    for limit in (None, budget):
        a = analyze(path, budget=limit)
        reports.append(build_report(a, evaluate(a, packs, ()), None, 0, None))
    whole, part = reports
    assert "sample" not in whole
    s = part["sample"]
    assert 0.2 < s["fraction"] < 0.35 and s["capture_rows"]["call"] == rows["call"]
    assert 0 < s["sample_rows"]["call"] < rows["call"] * 0.4

    def shares(report):
        window = report["gpu"]["window_ns"]
        return {(f["rule_id"], f["site"]): f["cost_ns"] / window for f in report["findings"]}

    a, b = shares(whole), shares(part)
    assert set(a) == set(b) and a
    for key in a:
        assert b[key] == pytest.approx(a[key], rel=0.1, abs=0.005), key
    busy = [d["busy_pct"] for r in reports for d in r["gpu"]["devices"]]
    assert busy[1] == pytest.approx(busy[0], abs=2.0)


@pytest.mark.parametrize("kind", ["builder", "bundled capture", "bundled trace"])
def test_a_sampled_capture_is_replayed_in_two_halves_of_alternate_slices(tmp_path, kind):
    """The fixes of a capture's sample are replayed on two halves, its even and its odd
    slices; each finding with an estimate gives both, and the estimate is their sum (the
    halves' time is the window's). The halves hold the calls of their slices: counted in
    the capture itself (pyarrow, the capture's clock) for the slices of each parity."""
    from zym.analysis.sample import SampledTimeline
    from zym.analysis.units import fmt_ns

    path = _capture(kind, tmp_path)
    cap = open_capture(path)
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    budget = B.estimate_bytes({t: n * 0.4 for t, n in rows.items()})
    a = analyze(path, None, "all", budget=budget)
    sample, tl = a.sample, a.timeline
    assert sample is not None
    if kind == "bundled trace":  # a few long steps: one slice of them, no halves
        assert len(sample.slices) == 1 and not isinstance(tl, SampledTimeline)
        assert all(f.saving_halves_ns is None for f in evaluate(a, load_packs(()), ()))
        return
    assert isinstance(tl, SampledTimeline) and tl.sample.of_capture
    assert len(tl.sample.ranges) == len(sample.slices)
    calls = pq.read_table(path, columns=["record", "ts_ns"]).to_pydict()
    ts = [t for r, t in zip(calls["record"], calls["ts_ns"], strict=True) if r == "call"]
    for half in (0, 1):
        want = sum(1 for t in ts for lo, hi in sample.slices[half::2] if lo <= t < hi)
        assert tl.halves[half].n_calls == want > 0
    findings = evaluate(a, load_packs(()), ())
    estimated = [f for f in findings if f.edit is not None and f.saving_ns is not None]
    assert estimated
    for f in estimated:
        h0, h1 = f.saving_halves_ns
        assert (f"(each half of the capture's sample, its alternate slices, replayed apart "
                f"gives ~{fmt_ns(h0)} and ~{fmt_ns(h1)})") in f.saving_how
        n0, n1 = tl.sample.half_ns(0), tl.sample.half_ns(1)
        assert abs(f.saving_ns - (h0 * n0 + h1 * n1) / (n0 + n1)) <= 2
        assert f.to_dict()["saving_halves_ns"] == [h0, h1]
    report = build_report(a, findings, None, 0, None)
    assert report["replay"]["sample"]["of_capture_sample"] is True
    whole = analyze(path, None, "all")
    assert not isinstance(whole.timeline, SampledTimeline)
    assert all(f.saving_halves_ns is None for f in evaluate(whole, load_packs(()), ()))


def test_the_halves_of_a_capture_sample_lie_in_the_window():
    from zym.analysis.sample import slice_sample

    slices = ((0, 100), (100, 250), (250, 400), (400, 2**62))
    got = slice_sample((50, 300), slices)
    assert got.ranges == ((50, 100), (100, 250), (250, 300)) and got.of_capture
    assert (got.half_ns(0), got.half_ns(1)) == (50 + 50, 150) and got.window_ns == 250
    assert slice_sample((120, 240), slices) is None  # one slice meets it: no halves
    assert slice_sample((0, 0), slices) is None
    sample = B.Sample(1, 2, 0.5, ((0, 10), (100, 110), (200, 210)), {}, {},
                      shifts=(0, -80, -160))
    assert sample.in_sample_clock() == ((0, 20), (20, 40), (40, 2**63 - 1))
    assert B.Sample(1, 2, 0.5, ((0, 10),), {}, {}).in_sample_clock() == ()


def _lines_server(path, requests: int = 40):
    """``decode_server`` as eBPF records it: no spans, the executing line of every frame (a request
    starts where ``handle_batch`` goes back to its first line)."""
    b = CaptureBuilder()
    for _ in range(requests):
        for _ in range(6):
            b.kernel(SERVE + [("python", "handle_batch", "srv.py", 31),
                              ("python", "forward", "model.py", 12), ("torch_op", "aten::mm")],
                     "gemm", gpu_us=40)
        b.scalar_readback(SERVE + [("python", "handle_batch", "srv.py", 33),
                                   ("python", "decode", "srv.py", 41)])
        b.copy(SERVE + [("python", "handle_batch", "srv.py", 35),
                        ("python", "strip", "srv.py", 44)], "DtoH", nbytes=4096)
        b.tick(90)
    return b.write(path)


@pytest.mark.parametrize("kind", ["spans", "lines"])
def test_no_seam_cuts_a_step(tmp_path, kind):
    """Slices are cut at the steps' starts: every step of the sample is one of the capture's,
    whole (a seam that cut one would join its two parts into one longer step, and its first
    steps would look like warm-up)."""
    build = decode_server if kind == "spans" else _lines_server
    path = build(tmp_path / "c.parquet", requests=120)
    cap = open_capture(path)
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    whole = analyze(path)
    part = analyze(path, budget=B.estimate_bytes({t: n * 0.3 for t, n in rows.items()}))
    a, b = whole.phases.steps, part.phases.steps
    assert a.source == b.source == kind and a.function == b.function
    assert part.sample.cut_at_steps == len(part.sample.slices) and b.count >= 6
    # each step of the sample lasts as long as one of the capture's (the builder's clock:
    # every request alike but the last, which has no pause after it)
    lasting = set(a.durations().tolist())
    assert len(lasting) <= 2 and set(b.durations().tolist()) <= lasting
    assert part.phases.warmup_steps == whole.phases.warmup_steps == 0
    # each slice runs from a step's start (the first: from the capture's start) to a step's
    starts = {int(t) for t in a.start_ns}
    first, *rest = part.sample.slices
    assert first[0] == B.plan(cap, part.sample.budget).slices[0][0] and first[1] in starts
    assert all(lo in starts and hi in starts for lo, hi in rest)
    line = capture_sample_line(part.sample.to_dict())
    assert f"{len(part.sample.slices)} slices spread evenly at whole steps, " in line


def test_slices_are_cut_at_the_steps_found_in_them():
    """``at_steps`` from numbers: steps every 10 ns in the sample's clock; three slices."""
    sample = B.Sample(1, 2, 0.5, ((0, 35), (100, 135), (200, 235)), {"call": 9}, {"call": 9},
                      extent=(0, 300), shifts=(0, -60, -125))
    # the slices in the sample's clock: [0, 35), [40, 75), [75, 110)
    starts = np.array([0, 10, 20, 30, 43, 53, 63, 73, 75, 85, 95, 105])
    thread = np.array([1, 11, 21, 31, 40, 43, 53, 63, 73, 75, 85, 95, 105])
    cut = B.at_steps(sample, starts, thread)
    # first: its own start to its last step's; second: 43..73 (40 is its first call: never
    # a step's start); third: 75 is its first call, so 85..105; back in the capture's clock
    assert cut.slices == ((0, 30), (103, 133), (210, 230))
    assert cut.cut_at_steps == 3 and cut.shifts == () and cut.sample_rows == {}
    assert cut.fraction == pytest.approx(0.5 * (30 + 30 + 20) / 105)
    # a slice of fewer than two starts is left as it was
    one = B.at_steps(sample, np.array([10, 20, 53, 95]), thread)
    assert one.slices == ((0, 20), (100, 135), (200, 235)) and one.cut_at_steps == 1


def test_slices_too_short_for_the_steps_are_fewer_and_longer():
    sample = B.Sample(1, 2, 0.25, B.spread((0, 9600), 8, 0.25), {}, {}, extent=(0, 9600))
    assert sample.slices[1] == (1200, 1500)
    assert B.longer_slices(sample, 75.0) is None  # 300 ns a slice: four steps of 75
    longer = B.longer_slices(sample, 150.0)  # 2,400 ns together: four slices of 600
    assert longer.slices == ((0, 600), (2400, 3000), (4800, 5400), (7200, 7800))
    assert B.longer_slices(sample, 5000.0).slices == ((0, 2400),)  # one, however short


def test_row_counts_from_the_metadata_agree_with_a_scan(tmp_path):
    path = decode_server(tmp_path / "c.parquet", requests=30)
    cap = open_capture(path)
    assert B._row_groups(cap) == B._scanned(cap)
    # the same file as one row group of every table: read by the scan
    mixed = tmp_path / "mixed.parquet"
    table = pq.read_table(path)
    meta = dict(table.schema.metadata) | {HASH_KEY.encode(): HASH_PLACEHOLDER.encode()}
    pq.write_table(table.replace_schema_metadata(meta), mixed, row_group_size=1 << 30)
    seal(mixed)
    one = open_capture(mixed)
    assert B._row_groups(one) is None
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    budget = B.estimate_bytes({t: n * 0.5 for t, n in rows.items()})
    assert B.plan(one, budget) == B.plan(cap, budget)


ENTRY = "import sys; sys.argv[0] = 'zym'; from zym.cli.entry import main; main()"
APP = "import sys; sys.argv[0] = 'zym'; from zym.cli.main import app; app()"


def _zym(*args, code=ENTRY):
    """The console script as users run it (its own parser), or the typer app (``APP``)."""
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          check=False)


@pytest.mark.parametrize("kind", ["builder", "bundled capture"])
def test_past_the_default_budget_the_sample_fits_the_default_sample_size(tmp_path, monkeypatch,
                                                                          kind):
    """Without --memory-budget (``given`` False), the whole capture is analysed where its
    estimate fits the default budget; past it, the sample is the one a given budget of
    DEFAULT_SAMPLE_BYTES makes (or of the default budget itself, where that is less)."""
    cap = open_capture(_capture(kind, tmp_path))
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    whole = B.estimate_bytes(rows)
    small = B.estimate_bytes({t: n * 0.2 for t, n in rows.items()})
    monkeypatch.setattr(B, "DEFAULT_SAMPLE_BYTES", small)
    assert B.plan(cap, whole, given=False) is None       # fits the default: whole
    default = (whole + small) // 2                        # past it
    got, given = B.plan(cap, default, given=False), B.plan(cap, small)
    assert got is not None and 0.15 < got.fraction < 0.25
    assert (got.budget, got.default_budget) == (small, default) and given.default_budget is None
    assert (got.fraction, got.slices) == (given.fraction, given.slices)
    # a budget given samples to fit all of it, more than the default's sample
    assert B.plan(cap, default).fraction > 2 * got.fraction
    # a default budget below the default sample size: the sample fits the budget
    tiny = B.plan(cap, small // 2, given=False)
    assert (tiny.fraction, tiny.slices) == (B.plan(cap, small // 2).fraction,
                                            B.plan(cap, small // 2).slices)
    # the report says which budget the whole exceeded and what the sample fits
    line = capture_sample_line(got.to_dict())
    assert "more than the default budget" in line and "SAMPLED in" in line
    assert "more than the default" not in capture_sample_line(given.to_dict())
    analysis = analyze(cap.path, budget=default, budget_given=False)
    said = analysis.to_dict()["sample"]
    assert (said["budget_bytes"], said["default_budget_bytes"]) == (small, default)
    by_size = analyze(cap.path, budget=small).to_dict()["sample"]  # (cut at the steps alike)
    assert (said["fraction"], said["slices"]) == (by_size["fraction"], by_size["slices"])


def test_the_help_names_the_default_sample_size():
    from zym.cli.options import memory_budget_option

    text = memory_budget_option("the analysis may use", "the report").help
    assert f"fit {B.DEFAULT_SAMPLE_BYTES >> 30} GiB" in text


def test_the_cli_says_it_sampled_and_refuses_a_bad_size(tmp_path):
    path = decode_server(tmp_path / "c.parquet", requests=60)
    out = _zym("analyze", str(path), "--memory-budget", "1K", "--no-progress")
    assert out.returncode == 0, out.stderr
    # 1 KiB fits no sample (the interpreter and libraries alone take more): the least is read,
    # and the report says so rather than that the sample fits
    said = " ".join(out.stdout.split())  # (the text is wrapped)
    assert "SAMPLED at the least: the memory budget (1.02 kB) is below" in said
    assert "to fit the memory budget" not in said
    got = _zym("analyze", str(path), "--memory-budget=1K", "--format", "json", "--no-progress")
    report = json.loads(got.stdout)
    assert report["sample"]["fraction"] == B.MIN_FRACTION
    assert report["sample"]["budget_bytes"] == 1024
    cap = open_capture(path)
    rows = {t: cap.rows(t) * B.MIN_FRACTION for t in B.SAMPLED_TABLES}
    events = rows["call"] + rows["gpu"] + rows["range"]  # well under 3 M: the first cost
    least = B.FIXED_BYTES + B.HEADROOM * (400 * events + 45 * rows["span"])
    assert report["sample"]["least_bytes"] == pytest.approx(least, abs=1)
    md = _zym("analyze", str(path), "--memory-budget", "1K", "-f", "markdown", "--no-progress")
    assert "SAMPLED at the least" in md.stdout
    # a budget between the least sample and the whole capture: a sample that fits it
    between = (int(least) + report["sample"]["estimated_bytes"]) // 2
    fits = _zym("analyze", str(path), "--memory-budget", str(between), "--no-progress")
    assert "SAMPLED to fit the memory budget" in " ".join(fits.stdout.split()), fits.stdout
    windowed = _zym("analyze", str(path), "--memory-budget", "1K", "-w", "steps:2:5")
    assert windowed.returncode == 2 and "--memory-budget" in windowed.stderr
    assert windowed.stderr.strip().count("\n") == 0
    bad = _zym("analyze", str(path), "--memory-budget", "lots", "--no-progress")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().count("\n") == 0 and "--memory-budget" in bad.stderr
    whole = _zym("analyze", str(path), "--format", "json", "--no-progress")
    assert "sample" not in json.loads(whole.stdout)
    # the typer app takes the option too, and refuses the same way
    typer_out = _zym("analyze", str(path), "--memory-budget", "1K", "--no-progress", code=APP)
    assert typer_out.returncode == 0 and "SAMPLED at the least" in typer_out.stdout
    typer_bad = _zym("analyze", str(path), "--memory-budget", "lots", code=APP)
    assert typer_bad.returncode == 2 and typer_bad.stderr == bad.stderr


SAMPLED_TRACE = """
import json, sys
from zym.analysis import analyze
from zym.capture import kineto_stream
kineto_stream.window_events = lambda budget: 20_000  # (the import's windows: a few)
said = []
result = analyze(sys.argv[1], said.append, budget=int(sys.argv[2]),
                 budget_given=sys.argv[3] == "1")
print(json.dumps({"sample": result.to_dict().get("sample"), "said": said,
                  "source": str(result.data.source)}))
"""


def test_a_trace_past_the_budget_is_imported_out_of_core_then_sampled(tmp_path):
    """The budget also bounds a trace's import: past ``budget`` at the in-memory import's
    bytes an event, it is imported out of core into a temporary capture, which is sampled
    where its analysis would not fit; nothing is left in the temporary folder."""
    from zym.analysis.load import _in_memory_events
    from zym.capture.kineto_stream import ANALYZE_BYTES_PER_EVENT, analyze_in_memory_events

    assert _in_memory_events(None) is None
    assert _in_memory_events(1 << 30) == min(analyze_in_memory_events(),
                                             (1 << 30) // ANALYZE_BYTES_PER_EVENT)
    trace = Path(__file__).parents[2] / "sample_traces" / "gpt_decode_server.trace.json.gz"
    budget = 10 << 20  # 10 MB: ~75 k events in memory (the trace has 165 k); nor its analysis
    def run(budget_given: bool) -> dict:
        done = subprocess.run([sys.executable, "-c", SAMPLED_TRACE, str(trace), str(budget),
                               "1" if budget_given else "0"], capture_output=True, text=True,
                              check=True, env={**os.environ, "TMPDIR": str(tmp_path)})
        return json.loads(done.stdout)

    # the CLI's default budget: which traces are imported out of core stays the default rule
    # (past half the memory available, at least 8 M events): this one is built in memory
    default = run(False)
    assert not any(s.startswith("building window") for s in default["said"])
    assert default["sample"] is None
    got = run(True)
    assert any(s.startswith("building window") for s in got["said"])
    assert any(s.startswith("sampling") for s in got["said"])
    assert got["sample"]["budget_bytes"] == budget and got["source"] == str(trace)
    assert 0 < got["sample"]["sample_rows"]["call"] < got["sample"]["capture_rows"]["call"]
    assert not list(tmp_path.iterdir())


def test_a_capture_of_the_gpu_side_alone_is_sampled_by_its_operations(tmp_path):
    """Without calls, the slices keep the GPU operations that start in them."""
    import polars as pl
    from zym.schemas.io import write_capture
    from zym.schemas.meta import CaptureMeta

    b = CaptureBuilder()
    for _ in range(300):
        b.kernel(BATCH, "gemm", gpu_us=40)
        b.tick(20)
    t = b.tables()
    path = write_capture(tmp_path / "gpu.parquet", t | {"call": t["call"].clear()},
                         CaptureMeta(producer="test"))
    cap = open_capture(path)
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    assert rows["call"] == 0 and rows["gpu"] == 300
    sample = B.write_sample(cap, B.plan(cap, B.estimate_bytes({"gpu": 300 * 0.25})),
                            tmp_path / "s.parquet")
    src = t["gpu"]["ts_ns"]
    expected = sum(int(((src >= a) & (src < z)).sum()) for a, z in sample.slices)
    assert sample.sample_rows["gpu"] == expected > 0
    got = pl.read_parquet(tmp_path / "s.parquet").filter(pl.col("record") == "gpu")
    assert got.height == expected
    # no call: no line that syncs or copies to name (zym.analysis.census)
    a = analyze(path, budget=B.estimate_bytes({"gpu": 300 * 0.25}))
    lines = a.sample_facts()["sync_copy_lines"]
    assert (lines["capture"], lines["sample"], lines["outside"]) == (0, 0, [])


def test_zym_diff_compares_samples_per_step_and_says_so(tmp_path):
    """`zym diff --memory-budget`: each capture whose analysis would not fit its half of the
    budget (two analyses at once) is sampled; per-step figures compare as the whole ones do."""
    before = decode_server(tmp_path / "before.parquet")
    after = decode_server(tmp_path / "after.parquet", gemm_us=60)  # each GEMM 50% longer
    cap = open_capture(before)
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    budget = 2 * B.estimate_bytes({t: n * 0.3 for t, n in rows.items()})
    runs = {}
    for name, extra in (("whole", []), ("sampled", ["--memory-budget", str(budget)])):
        got = _zym("diff", str(before), str(after), "-f", "json", "--no-progress", *extra)
        assert got.returncode == 0, got.stderr
        runs[name] = json.loads(got.stdout)
    whole, sampled = runs["whole"], runs["sampled"]
    assert "sample" not in whole["before"] and "sample" not in whole["after"]
    for side in ("before", "after"):
        assert 0.2 < sampled[side]["sample"]["fraction"] < 0.35
    assert sampled["per"] == whole["per"] == "step"
    gpu = [r["regression_pct"]["gpu_ns"] for r in (whole, sampled)]
    assert gpu[0] == pytest.approx(50 * 6 * 40 / (6 * 40 + 2 + 1), rel=0.05)  # GEMMs +50%
    assert gpu[1] == pytest.approx(gpu[0], rel=0.05)
    text = _zym("diff", str(before), str(after), "--memory-budget", str(budget),
                "--no-progress")
    assert "before: SAMPLED to fit the memory budget" in text.stdout
    assert "after: SAMPLED to fit the memory budget" in text.stdout
    bad = _zym("diff", str(before), str(after), "--memory-budget", "0")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0


def test_a_sample_that_cannot_be_written_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """A full temporary folder: the error names the capture and the folder, not the
    temporary file, and the folder made for the sample is gone."""
    import errno

    from zym.schemas.errors import OutputError
    from zym.schemas.output import write_error

    path = decode_server(tmp_path / "c.parquet", requests=30)
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(folder))

    def full(cap, sample, out, spans=None):
        out.write_bytes(b"partial")
        raise write_error(out, OSError(errno.ENOSPC, "No space left on device"))

    monkeypatch.setattr(B, "write_sample", full)
    with pytest.raises(OutputError) as got:
        analyze(path, budget=1024)
    message = str(got.value)
    assert "\n" not in message and str(path) in message and str(folder) in message
    assert "no space left on the device" in message and "sample.parquet" not in message
    assert not list(folder.iterdir())


def _with_ranges(path: Path, out: Path) -> Path:
    """``path``'s capture with an NVTX range around each of its first thread's calls."""
    from zym.schemas.io import CaptureWriter

    cap = open_capture(path)
    calls = cap.load("call")
    first = calls.filter(calls["tid"] == calls["tid"][0])
    ranges = first.select("pid", "tid", "ts_ns", "dur_ns").with_columns(
        name=pl.lit("step"), kind=pl.lit("nvtx"), domain=pl.lit("default"))
    with CaptureWriter(out, cap.meta) as w:
        for table in ("frame", "stack", "span", "call", "gpu"):
            w.write(table, cap.load(table))
        w.write("range", ranges)
    return out


def test_an_export_of_a_sample_holds_the_samples_ranges(tmp_path):
    """`zym report` in a budget: the analysis, spans and ranges are the sample's (its clock),
    never the whole capture's; without spans (the HTML report), none are read."""
    from zym.analysis.export.source import load_export_source

    path = _with_ranges(decode_server(tmp_path / "c.parquet"), tmp_path / "r.parquet")
    cap = open_capture(path)
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    src = load_export_source(path, budget=B.estimate_bytes({t: n * 0.3 for t, n in rows.items()}))
    sample = src.analysis.data.sample
    assert sample is not None and sample.path is not None
    # each range of the sample is one of a call of the sample (same start and length)
    calls = src.analysis.whole.data.calls
    starts = dict(zip(calls["ts_ns"].to_list(), calls["dur_ns"].to_list(), strict=True))
    assert 0 < src.ranges.height == sample.sample_rows["range"] < rows["range"]
    assert 0 < src.spans.height == sample.sample_rows["span"] < rows["span"]
    assert all(starts.get(t) == d for t, d in src.ranges.select("ts_ns", "dur_ns").iter_rows())
    bare = load_export_source(path, with_spans=False, with_findings=False)
    assert bare.spans.height == 0 and bare.ranges.height == 0


def test_zym_report_says_it_sampled_and_refuses_a_bad_size(tmp_path):
    path = decode_server(tmp_path / "c.parquet", requests=60)
    pages = {}
    for name, extra in (("whole", []), ("sampled", ["--memory-budget", "1K"])):
        out = tmp_path / f"{name}.html"
        got = _zym("report", str(path), "-o", str(out), "--no-progress", *extra, code=APP)
        assert got.returncode == 0, got.stderr
        pages[name] = out.read_text()
    assert "SAMPLED at the least" in pages["sampled"]
    assert "SAMPLED" not in pages["whole"]
    bad = _zym("report", str(path), "-o", str(tmp_path / "x.html"), "--memory-budget", "lots",
               code=APP)
    assert bad.returncode == 2 and "--memory-budget" in bad.stderr
    assert bad.stderr.strip().count("\n") == 0 and not (tmp_path / "x.html").exists()


def test_a_part_that_cannot_be_written_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """A full temporary folder while a part of a capture is copied (`zym export --window`):
    the error names the capture and the folder, not the temporary file, and the folder made
    for the part is gone."""
    import errno

    from zym.schemas.errors import OutputError
    from zym.schemas.output import write_error

    path = decode_server(tmp_path / "c.parquet", requests=30)
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(folder))

    def full(cap, sample, out, spans=None, opened_before=True):
        out.write_bytes(b"partial")
        raise write_error(out, OSError(errno.ENOSPC, "No space left on device"))

    monkeypatch.setattr(B, "write_sample", full)
    with pytest.raises(OutputError) as got:
        B.capture_part(open_capture(path), "1ms:2ms")
    message = str(got.value)
    assert "\n" not in message and str(path) in message and str(folder) in message
    assert "its part cannot be written" in message and "part.parquet" not in message
    assert "export a shorter one" in message and "--memory-budget" not in message
    assert not list(folder.iterdir())


def test_the_mcp_tools_analyse_in_the_default_budget(tmp_path, monkeypatch):
    """`zym mcp`'s analyses are `zym analyze`'s by default: past half the memory available
    (here made small), a sample, and the report says so."""
    from zym.analysis.export import agent

    path = decode_server(tmp_path / "c.parquet", requests=60)
    assert "sample" not in agent.analyze_tool(str(path))
    monkeypatch.setattr(B, "available_budget", lambda: 1024)
    monkeypatch.setattr(agent, "_cache", agent._Cache())
    got = agent.analyze_tool(str(path))
    assert got["sample"]["budget_bytes"] == 1024 and got["sample"]["fraction"] < 0.01
    assert got["sample"]["default_budget_bytes"] == 1024  # (the default's, less than 1 GiB)


@pytest.mark.parametrize("steps", [True, False])
def test_the_sample_holds_every_span_of_its_slices_not_only_the_steps(tmp_path, monkeypatch,
                                                                        steps):
    """The steps are found in a first copy of only the spans they are found from; the sample
    analysed holds every span of its final slices (torch ops and native frames too), also
    where no step is found (its slices as planned: copied again all the same)."""
    path = _capture("bundled trace", tmp_path)
    if not steps:
        monkeypatch.setattr(B, "steps_of", lambda data: None)
    cap = open_capture(path)
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    opened, sample, _ = B.sampled(cap, B.estimate_bytes({t: n * 0.5 for t, n in rows.items()}))
    out = opened.path
    sampled_rows, source_rows = _source_rows(out), _source_rows(path)
    got, src = sampled_rows["span"], source_rows["span"]
    (_, b0), rest = sample.slices[0], sample.slices[1:]
    want = [r for r in src if r["ts_ns"] < b0 or any(a <= r["ts_ns"] < b for a, b in rest)]
    assert len(got) == len(want) == sample.sample_rows["span"] > 0
    # (slices longer than an eighth of the sample are copied a part at a time: every call of
    # them, with its GPU work, is there all the same)
    calls = {(r["pid"], r["correlation_id"]) for r in source_rows["call"]
             if any(a <= r["ts_ns"] < b for a, b in sample.slices)}
    assert {(r["pid"], r["correlation_id"]) for r in sampled_rows["call"]} == calls
    gpu = [r for r in source_rows["gpu"] if (r["pid"], r["correlation_id"]) in calls]
    assert len(sampled_rows["gpu"]) == len(gpu) > 0
    assert (len(sample.slices) < B.SLICES) == steps  # (its steps: fewer, longer slices)
    # spans of torch ops and native frames, not only those the steps are found from
    stacks = pq.read_table(out, columns=["record", "stack_id"]).to_pylist()
    of_steps = set(B.step_stacks(cap).to_list())
    other = [r for r in stacks if r["record"] == "span" and r["stack_id"] not in of_steps]
    assert of_steps and len(other) > len(got) // 2
    assert (sample.cut_at_steps > 0) == steps


@pytest.mark.parametrize("seed", range(6))
def test_cut_slices_lie_in_their_slices_between_step_starts(seed):
    """``at_steps`` on random slices and steps: each cut slice lies in its slice, runs from a
    step start to a later one (the first slice: from its own start), no step start it keeps
    is the slice's first call, and a slice with fewer than two usable starts stays as it
    was; the fraction shrinks with the slices' length."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 9))
    lengths = rng.integers(1_000, 50_000, n)
    gaps = rng.integers(0, 100_000, n)
    starts_at = np.cumsum(gaps + np.concatenate([[0], lengths[:-1]]))
    slices = tuple((int(a), int(a + m)) for a, m in zip(starts_at, lengths, strict=True))
    shifts, end = [], None
    for a, b in slices:  # as write_sample shifts them: each after the one before
        shift = 0 if end is None else end - a
        shifts.append(shift)
        end = b + shift + int(rng.integers(0, 500))
    sample = B.Sample(1, 2, 0.3, slices, {}, {}, extent=(0, int(starts_at[-1]) + 60_000),
                      shifts=tuple(shifts))
    clock = np.sort(rng.integers(0, end, 400))   # calls on the steps' thread, sample's clock
    steps = np.sort(rng.choice(clock, int(rng.integers(0, 60)), replace=False))
    cut = B.at_steps(sample, steps, clock)
    kept = 0
    for k, ((a, b), (lo, hi), shift) in enumerate(zip(slices, cut.slices, shifts, strict=True)):
        assert a <= lo < hi <= b
        here = steps[(steps >= a + shift) & (steps < b + shift)] - shift
        inside = clock[(clock >= a + shift) & (clock < b + shift)]
        usable = here[here > inside[0] - shift] if len(inside) else here
        if (lo, hi) == (a, b) and not (k == 0 and len(usable)):
            assert len(usable) < (1 if k == 0 else 2)
            continue
        kept += 1
        assert hi in usable and (lo == a if k == 0 else lo in usable and lo < hi)
        assert lo == a or lo == usable.min()
        assert hi == usable.max()
    assert cut.cut_at_steps == kept
    total = sum(b - a for a, b in slices)
    assert cut.fraction == pytest.approx(0.3 * sum(b - a for a, b in cut.slices) / total)


@pytest.mark.parametrize(("kind", "window", "start"), [
    ("builder", "4ms:9ms", (4_000_000, 9_000_000)),
    ("bundled capture", "2.2s:2.6s", (2_200_000_000, 2_600_000_000))])
def test_a_timeline_export_of_a_part_holds_that_part_only(tmp_path, kind, window, start):
    """`zym export --window FROM:TO` of a zym capture: the Perfetto timeline of the calls,
    spans and ranges that start in that part, with the GPU work of those calls, in the
    capture's own clock (read from the file a part at a time); counted against the capture's
    rows read with pyarrow. The builder's capture with spans and NVTX ranges; the bundled
    eBPF + CUPTI capture (its spans rebuilt from the calls' stacks, not counted)."""
    from zym.analysis.export.check import check_trace

    path = (_with_ranges(decode_server(tmp_path / "c.parquet", requests=60), tmp_path / "r.parquet")
            if kind == "builder" else _capture(kind, tmp_path))
    out = tmp_path / "part.pftrace"
    got = _zym("export", str(path), "--window", window, "-o", str(out), "--no-progress",
               code=APP)
    assert got.returncode == 0, got.stderr
    rows = pq.read_table(path, columns=["record", "pid", "ts_ns", "correlation_id"]).to_pylist()
    first = min(r["ts_ns"] for r in rows if r["record"] == "call")
    t0, t1 = first + start[0], first + start[1]
    calls = {(r["pid"], r["correlation_id"]) for r in rows
             if r["record"] == "call" and t0 <= r["ts_ns"] < t1}
    gpu = [r for r in rows if r["record"] == "gpu" and (r["pid"], r["correlation_id"]) in calls]
    spans = [r for r in rows if r["record"] == "span" and t0 <= r["ts_ns"] < t1]
    ranges = [r for r in rows if r["record"] == "range" and t0 <= r["ts_ns"] < t1]
    slices = [s for track in check_trace(out.read_bytes()).slices.values() for s in track]
    kinds = Counter(s.category for s in slices)
    assert kinds["cuda_api"] == len(calls) > 0
    on_gpu = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")
    assert sum(kinds[k] for k in on_gpu) == len(gpu) > 0
    if kind == "builder":
        assert kinds["python_function"] == len(spans) > 0
        assert sum(n for k, n in kinds.items() if "nvtx" in k) == len(ranges) > 0
    assert min(s.ts_ns for s in slices) >= t0
    whole = tmp_path / "whole.pftrace"
    assert _zym("export", str(path), "-o", str(whole), "--no-progress", code=APP).returncode == 0
    assert Counter(s.category for track in check_trace(whole.read_bytes()).slices.values()
                   for s in track)["cuda_api"] > len(calls)


@pytest.mark.parametrize("which", ["built", "bundled eBPF"])
def test_a_capture_without_spans_is_sampled_in_memory(tmp_path, monkeypatch, which):
    """A capture without spans or ranges (one built with a GPU side; the bundled eBPF
    capture, calls and executing lines only) is sampled in memory: no file is written, the
    tables are read once, and the analysis is that of the same slices written into a sample
    capture and read back (the copy that captures with spans get)."""
    import tempfile

    from zym.analysis import load
    from zym.schemas.io import write_capture
    from zym.schemas.meta import CaptureMeta

    if which == "built":
        b = CaptureBuilder()
        for _ in range(200):
            for _ in range(4):
                b.kernel(BATCH + [("python", "forward", "model.py", 12)], "gemm", gpu_us=40)
            b.scalar_readback(BATCH + [("python", "decode", "srv.py", 41)])
            b.tick(50)
        tables = b.tables()
        tables.pop("span")
        path = write_capture(tmp_path / "c.parquet", tables, CaptureMeta(producer="test"))
    else:
        path = REPO / "sample_traces" / "gpt_decode_server.ebpf.parquet"
    cap = open_capture(path)
    budget = B.estimate_bytes({t: cap.rows(t) * 0.3 for t in B.SAMPLED_TABLES})
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    reads: list[Path] = []
    read = load.load_opened
    monkeypatch.setattr(load, "load_opened", lambda c, *a, **k: (reads.append(c.path),
                                                                  read(c, *a, **k))[1])
    held = analyze(path, budget=budget)
    assert held.sample is not None and held.sample.sample_rows["call"] > 0
    if which == "built":  # (its steps found, its slices cut: held again)
        assert held.sample.cut_at_steps > 0
    assert reads == [] and list(temp.iterdir()) == []
    copied = B._copied

    def written(cap, sample, codes, skip):
        got = copied(cap, sample, codes, skip)
        out = tmp_path / "sample.parquet"
        sample = B.write_sample(cap, got.sample, out)
        return B.Sampled(open_capture(out), sample, None)

    monkeypatch.setattr(B, "_copied", written)
    again = analyze(path, budget=budget)
    assert reads == [tmp_path / "sample.parquet"]
    assert json.dumps(held.to_dict(), default=str) == json.dumps(again.to_dict(), default=str)


@pytest.mark.parametrize("steps", [True, False])
def test_a_sample_held_in_memory_is_read_as_its_caller_reads_a_capture(tmp_path, monkeypatch,
                                                                        steps):
    """Held in memory (no spans nor ranges), a sample's tables are those the caller asked
    for: an export's (``codes`` False, every column) keeps the names as text and the columns
    the analysis leaves out, after its steps were looked for in the same tables (none found:
    the tables held are those given to the caller) or its slices cut at them (held again)."""
    from zym.analysis import phases
    from zym.analysis.load import UNREAD, load_capture

    if not steps:
        monkeypatch.setattr(phases, "find_steps", lambda *a: None)
    from zym.schemas.io import write_capture
    from zym.schemas.meta import CaptureMeta

    tables = CaptureBuilder()
    for _ in range(100):
        tables.kernel(BATCH + [("python", "forward", "model.py", 12)], "gemm", gpu_us=40)
        tables.scalar_readback(BATCH + [("python", "decode", "srv.py", 41)])
    held = tables.tables()
    held.pop("span")
    path = write_capture(tmp_path / "c.parquet", held, CaptureMeta(producer="test"))
    cap = open_capture(path)
    budget = B.estimate_bytes({t: cap.rows(t) * 0.3 for t in B.SAMPLED_TABLES})
    export = load_capture(path, budget=budget)
    analysis = load_capture(path, codes=True, skip=UNREAD, budget=budget)
    assert export.sample is not None and analysis.sample is not None
    assert (export.sample.cut_at_steps > 0) == steps
    assert export.calls["name"].dtype == pl.String and export.gpu["name"].dtype == pl.String
    assert analysis.calls["name"].dtype == pl.Categorical
    assert set(UNREAD["call"]) <= set(export.calls.columns)
    assert not set(UNREAD["call"]) & set(analysis.calls.columns)
    assert export.calls.height == analysis.calls.height > 0


@pytest.mark.parametrize("table", ["call", "span"])
def test_a_bad_row_in_a_sample_is_named_by_the_capture_the_user_gave(tmp_path, table):
    """A row the checks refuse, in a sample (a call: held in memory; a span of a capture
    with spans: in the sample written): the one-line error (exit 2) names the user's capture,
    not the temporary copy of it (which it named before)."""
    from zym.schemas.io import write_capture
    from zym.schemas.meta import CaptureMeta

    b = CaptureBuilder()
    for _ in range(300):
        with b.enclosing(BATCH):
            b.kernel(BATCH + [("python", "forward", "model.py", 12)], "gemm", gpu_us=40)
            b.scalar_readback(BATCH + [("python", "decode", "srv.py", 41)])
    tables = b.tables()
    if table == "call":
        tables.pop("span")
    first = pl.int_range(pl.len()) < 3   # (the first slice starts where the capture does)
    tables[table] = tables[table].with_columns(
        pl.when(first).then(99_999).otherwise(pl.col("stack_id")).alias("stack_id"))
    path = write_capture(tmp_path / "c.parquet", tables, CaptureMeta(producer="test"))
    cap = open_capture(path)
    budget = B.estimate_bytes({t: cap.rows(t) * 0.3 for t in B.SAMPLED_TABLES})
    got = _zym("analyze", str(path), "--memory-budget", str(budget), "--no-progress")
    assert got.returncode == 2 and got.stderr.count("\n") == 1, got.stderr
    assert f"{path}" in got.stderr and "zym-sample" not in got.stderr, got.stderr
    assert f"{table} table: 3 row(s) whose stack_id is not in the stack table" in got.stderr


def test_a_sampling_that_stops_does_not_wait_for_the_census(tmp_path, monkeypatch):
    """The whole capture's census runs beside the sampling (seconds on a 100 M capture): where
    the sampling stops first (an error here; Ctrl-C alike), its error comes at once, not once
    the census ends (an executor's thread was waited for)."""
    import threading
    import time

    from zym.analysis import census
    from zym.schemas.errors import InputError

    path = decode_server(tmp_path / "c.parquet", requests=40)
    cap = open_capture(path)
    released = threading.Event()
    monkeypatch.setattr(census, "sync_copy_census", lambda c: released.wait(60))

    def fails(*_):
        raise InputError("stopped")

    monkeypatch.setattr(B, "_copied", fails)
    t = time.monotonic()
    try:
        with pytest.raises(InputError, match="stopped"):
            B.sampled(cap, B.estimate_bytes({t: cap.rows(t) * 0.3 for t in B.SAMPLED_TABLES}))
        assert time.monotonic() - t < 30   # (the census is held for 60 s)
    finally:
        released.set()
