"""The analysis of a capture file reads its CPU spans by queries and a part at a time, never
the whole table: the same report as the analysis of the trace with its spans in memory, and
every span still checked."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from zym.analysis.load import SpanTable, load_capture
from zym.analysis.replay import GapCounter
from zym.schemas.io import Capture

REPO = Path(__file__).resolve().parents[2]
KINETO_SAMPLE = REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"


def _report(path: Path, window: str = "steady") -> dict:
    from zym.analysis.export.summary import build_report
    from zym.analysis.report import analyze
    from zym.rules import evaluate, load_packs

    a = analyze(path, window=window)
    report = build_report(a, evaluate(a, load_packs(()), ()), None, 5, None)
    report["capture"].pop("source")
    return json.loads(json.dumps(report, default=str))


@pytest.fixture(scope="module")
def sample_capture(tmp_path_factory) -> Path:
    from zym.capture.kineto import import_kineto

    out = tmp_path_factory.mktemp("spans") / "sample.parquet"
    import_kineto(KINETO_SAMPLE, out)
    return out


@pytest.mark.parametrize("window", ["steady", "all", "steps:2:6"])
def test_report_of_a_capture_read_in_parts_is_the_traces(sample_capture, monkeypatch, window):
    """Spans read from the file in parts of 5,000 rows (the sample has ~90,000), the whole
    table never loaded: the report is the one the trace's in-memory spans give."""
    want = _report(KINETO_SAMPLE, window)
    whole_loads = []
    real_load = Capture.load

    def load(self, table, *args, **kwargs):
        if table == "span":
            whole_loads.append(table)
        return real_load(self, table, *args, **kwargs)

    monkeypatch.setattr(Capture, "load", load)
    monkeypatch.setattr(SpanTable, "PART_ROWS", 5_000)
    got = _report(sample_capture, window)
    assert whole_loads == []
    assert got == want


H200_TRACES = {  # workloads of the repo's H200 runs besides the bundled one
    "two threads": "bench/whatif/results/h200-threads/sidecar.trace.json.gz",
    "no python stacks": "bench/whatif/results/h200-varied/moe-nostack.trace.json.gz",
    "detection": "bench/whatif/results/h200-blind/kineto/detect.trace.json.gz",
}


@pytest.mark.parametrize("name", H200_TRACES)
def test_h200_traces_read_in_parts_give_the_traces_report(name, tmp_path, monkeypatch):
    """Other H200 workloads (a second thread making CUDA calls, a trace without Python
    stacks, a detection service): their captures read in 3,000-row slices give the report
    of the trace with its spans in memory (the slices, windows and queries against the
    whole table; the counts themselves are checked against a loop in test_fixed_costs)."""
    from zym.capture.kineto import import_kineto

    trace = REPO / H200_TRACES[name]
    want = _report(trace)
    import_kineto(trace, tmp_path / "c.parquet")
    monkeypatch.setattr(SpanTable, "PART_ROWS", 3_000)
    assert _report(tmp_path / "c.parquet") == want


def test_span_table_of_a_file_reads_as_the_file(sample_capture, monkeypatch):
    """Height, parts and window of a file's span table against the table loaded whole."""
    from zym.schemas.io import open_capture

    monkeypatch.setattr(SpanTable, "PART_ROWS", 7_000)
    spans = load_capture(sample_capture).span_table
    whole = open_capture(sample_capture).load("span")
    assert spans.height == whole.height > 7_000
    parts = list(spans.parts(("ts_ns", "dur_ns")))
    assert len(parts) > 1 and max(p.height for p in parts) <= 7_000
    assert pl.concat(parts).equals(whole.select("ts_ns", "dur_ns"))
    t0 = int(whole["ts_ns"].quantile(0.3))
    t1 = int(whole["ts_ns"].quantile(0.6))
    inside = whole.filter((pl.col("ts_ns") < t1) & (pl.col("ts_ns") + pl.col("dur_ns") > t0))
    part = spans.within(t0, t1)
    assert part.height == inside.height
    assert pl.concat(part.parts(("ts_ns",))).equals(inside.select("ts_ns"))
    held = SpanTable(held=whole).within(t0, t1)
    assert held.height == inside.height


def test_a_bad_span_is_an_error_before_any_query(tmp_path):
    """A span with a negative duration, deep in the table, stops the analysis with the
    checks' one-line error (as loading the whole table did)."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "robustness"))
    from hostile import assert_clean_error, capture_rows, write_sealed, zym

    rows = capture_rows([(0, None, 0, 0)])
    n = 3_000
    width = len(rows["record"])
    for key in rows:
        rows[key] += [None] * n
    at = range(width, width + n)
    for i, row in enumerate(at):
        rows["record"][row] = "span"
        rows["pid"][row], rows["tid"][row] = 1, 1
        rows["ts_ns"][row], rows["dur_ns"][row] = 1_000 + i, -7 if i == n - 10 else 5
        rows["stack_id"][row] = 0
    p = write_sealed(tmp_path / "bad.parquet", rows)
    err = assert_clean_error(zym("analyze", p, "--no-progress", timeout=60))
    assert "span table" in err and "dur_ns" in err


@pytest.mark.parametrize("seed", range(6))
def test_gap_counts_added_a_part_at_a_time_in_any_order(seed):
    """GapCounter with the spans cut into parts and shuffled, weighted: each call's weight
    sum against a loop over calls and spans."""
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 60)), int(rng.integers(0, 400))
    calls = pl.DataFrame({"call_idx": np.arange(n), "pid": rng.integers(1, 3, n),
                          "tid": rng.integers(1, 4, n), "ts_ns": rng.integers(0, 500, n)})
    spans = pl.DataFrame({"pid": rng.integers(1, 3, m), "tid": rng.integers(1, 5, m),
                          "ts_ns": rng.integers(-50, 600, m), "w": rng.integers(1, 9, m)})
    want = [0] * n
    for c in calls.iter_rows(named=True):
        earlier = [d["ts_ns"] for d in calls.iter_rows(named=True)
                   if (d["pid"], d["tid"]) == (c["pid"], c["tid"])
                   and (d["ts_ns"], d["call_idx"]) < (c["ts_ns"], c["call_idx"])]
        lo = max(earlier) if earlier else None
        want[c["call_idx"]] = sum(s["w"] for s in spans.iter_rows(named=True)
                                  if (s["pid"], s["tid"]) == (c["pid"], c["tid"])
                                  and s["ts_ns"] <= c["ts_ns"]
                                  and (lo is None or s["ts_ns"] > lo))
    counter = GapCounter(calls)
    order = rng.permutation(m)
    for part in np.array_split(order, int(rng.integers(1, 6))):
        piece = spans[part]
        counter.add(piece, piece["w"].to_numpy())
    assert counter.total.tolist() == want


def test_a_capture_changed_under_the_analysis_is_a_one_line_error(sample_capture, tmp_path,
                                                                   monkeypatch):
    """The file truncated after the load, before the spans are read: each way of reading
    them is a one-line InputError naming the span table, not a traceback."""
    import shutil

    from zym.schemas.errors import InputError

    monkeypatch.setattr(SpanTable, "PART_ROWS", 5_000)  # read from the file, not held
    reads = {"check": lambda t: t.check(),
             "parts": lambda t: list(t.parts(("ts_ns",))),
             "query": lambda t: t.collect(t.lazy().select("ts_ns"))}
    for name, read in reads.items():
        copy = shutil.copy(sample_capture, tmp_path / f"{name}.parquet")
        spans = load_capture(copy).span_table
        if name != "check":
            spans.check()
        with open(copy, "r+b") as f:
            f.truncate(f.seek(0, 2) // 2)
        with pytest.raises(InputError) as e:
            read(spans)
        message = str(e.value)
        assert "span table" in message and "\n" not in message, (name, message)


def test_spans_of_a_windowed_import_read_in_slices(tmp_path, monkeypatch):
    """An out-of-core import writes each window's tables in turn, so the span rows lie among
    the other tables' rows: read in 5,000-row slices of the file, the report is the one the
    same capture gives with its spans held."""
    import polars as pl
    from zym.capture import kineto_stream
    from zym.capture.kineto import import_kineto

    monkeypatch.setattr(kineto_stream, "window_events", lambda budget: 20_000)
    capture = tmp_path / "windows.parquet"
    import_kineto(KINETO_SAMPLE, capture, force=True, budget=1)
    rows = (pl.scan_parquet(capture).with_row_index("i").filter(pl.col("record") == "span")
            .select(pl.col("i").min().alias("lo"), pl.col("i").max().alias("hi"), pl.len())
            .collect().row(0))
    assert rows[1] - rows[0] + 1 > rows[2]  # interleaved
    want = _report(capture)  # ~120,000 spans: one part, held
    monkeypatch.setattr(SpanTable, "PART_ROWS", 5_000)
    assert _report(capture) == want
