"""`zym import` out of core (``capture.kineto_stream``): a trace imported window by window
says what the whole-trace import of it says (``same_tables``: ids resolved to frames and
stack paths), on real H200 traces and on a synthetic one built to cross every window edge."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kineto_builder import KinetoBuilder
from same_tables import differences
from zym.capture import kineto_json, kineto_stream
from zym.capture.kineto import import_kineto
from zym.schemas.io import open_capture

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"
H200 = REPO / "bench" / "whatif" / "results"
# Real traces: a threaded service (a sidecar thread launching beside the main one), a
# torch.compile'd one, a mixture of experts without stacks. (An H200 decode loop's trace was
# one too: kept since as `zym import` wrote it, for the repository's size.)
# With the events a window takes (budget's events): tens of windows each.
REAL = {SAMPLE: 12_000,
        H200 / "h200-threads" / "sidecar.trace.json.gz": 12_000,
        H200 / "h200-varied" / "compiled.trace.json.gz": 2_000,
        H200 / "h200-varied" / "moe-nostack.trace.json.gz": 4_000}


def _windowed(monkeypatch, trace: Path, out: Path, events: int) -> int:
    """Import ``trace`` in windows of about ``events`` events; how many windows were built."""
    monkeypatch.setattr(kineto_stream, "window_events", lambda budget: events)
    said: list[str] = []
    import_kineto(trace, out, said.append, budget=1)
    return sum(s.startswith("building window") for s in said)


def _without_ids(value):
    """A report without the ids of paths and sites (stack ids, numbered differently by an
    import in windows: by first appearance)."""
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k not in ("path_id", "site_id")}
    return [_without_ids(v) for v in value] if isinstance(value, list) else value


def _whole(trace: Path, out: Path) -> Path:
    return import_kineto(trace, out, budget=1 << 40)


def _spanning_trace(path: Path) -> Path:
    """Two processes on three threads, interleaved in time (written one thread after the
    other: not in time order), with what crosses a window's start: ``ProfilerStep#N`` ops left
    open by the Python frame that opened them (as ``prof.step()`` does), runtime calls with a
    driver call inside, a long sync, a GPU queue that runs many steps behind its launches
    (kernels far from their calls), and a second process's launches."""
    a = KinetoBuilder(pid=100, tid=100)
    side = KinetoBuilder(pid=100, tid=101)
    other = KinetoBuilder(pid=200, tid=300)
    side._next_corr, other._next_corr = 50_000, 100_000
    side._next_ext, other._next_ext = 50_000, 100_000
    side._next_py, other._next_py = 50_000, 100_000
    with a.py("app.py(1): main"):
        for i in range(40):
            with a.py("torch/profiler/profiler.py(740): step"):
                step = a.open_op(f"ProfilerStep#{i}")
            with a.py("app.py(20): forward"):
                with a.op("aten::linear", dims=[[4, 8], [8, 8]], types=["float", "float"]):
                    a.launch(kernel="gemm", gpu_us=40.0)
                    driver_at = a.now
                    a.launch("cudaMemcpyAsync", kernel="Memcpy DtoH (Device -> Pageable)",
                             gpu_cat="gpu_memcpy", cpu_us=3.0)
                    a.events.append({"ph": "X", "cat": "cuda_driver", "name": "cuMemcpyAsync",
                                     "pid": 100, "tid": 100, "ts": driver_at + 0.5,
                                     "dur": 1.0, "args": {"correlation": 10_000 + i}})
                with a.py("app.py(30): sample"), a.op("aten::item"):
                    a.launch("cudaStreamSynchronize", kernel=None,
                             cpu_us=250.0 if i % 7 == 0 else 4.0)
            a.close_op(step)
    for builder, name in ((side, "app.py(50): sidecar"), (other, "worker.py(5): run")):
        with builder.py(name):
            for _ in range(150):
                with builder.op("aten::add"):
                    builder.launch(kernel="add", gpu_us=30.0)
                builder.tick(9.0)
    trace = a.trace()
    trace["traceEvents"] = a.events + other.events + side.events + trace["traceEvents"][-1:]
    path.write_text(json.dumps(trace))
    return path


@pytest.mark.parametrize("decoder", ["compiled", "msgspec"])
def test_synthetic_trace_the_same_in_windows(tmp_path, monkeypatch, decoder):
    """With either decoder (the compiled one hands batches over from threads: spilled once
    they are done, in file order)."""
    if decoder == "msgspec":
        monkeypatch.setattr(kineto_json, "_kineto_scan", None)
    elif kineto_json._kineto_scan is None:
        pytest.fail("the compiled Kineto decoder is not built (pip install -e . builds it)")
    trace = _spanning_trace(tmp_path / "t.json")
    whole = _whole(trace, tmp_path / "whole.parquet")
    for events in (40, 300):
        out = tmp_path / f"w{events}.parquet"
        windows = _windowed(monkeypatch, trace, out, events)
        assert windows >= 3, windows
        assert differences(out, whole) == [], events


def test_the_synthetic_trace_needs_the_carried_rows_and_their_parents(tmp_path, monkeypatch):
    """The trace above is one the window edges matter on: without the rows open at a
    window's start, or without the parents of those (the frame a ProfilerStep op was opened
    in), or without the GPU operations' processes looked up in the whole trace, it differs."""
    trace = _spanning_trace(tmp_path / "t.json")
    whole = _whole(trace, tmp_path / "whole.parquet")
    real = kineto_stream._carried

    def open_only(inputs, parent_row, hi):
        return {g: inputs[g].filter(inputs[g]["ts_ns"] + inputs[g]["dur_ns"] >= hi)
                for g in kineto_stream.CPU_GROUPS}

    for broken in (lambda inputs, parent_row, hi: {g: inputs[g].head(0)
                                                   for g in kineto_stream.CPU_GROUPS},
                   open_only):
        monkeypatch.setattr(kineto_stream, "_carried", broken)
        _windowed(monkeypatch, trace, tmp_path / "broken.parquet", 40)
        assert differences(tmp_path / "broken.parquet", whole) != []
    monkeypatch.setattr(kineto_stream, "_carried", real)
    monkeypatch.setattr(kineto_stream, "_issuers_from_spill", lambda gpu, files: gpu)
    _windowed(monkeypatch, trace, tmp_path / "broken.parquet", 40)
    assert any(d.startswith("gpu") for d in differences(tmp_path / "broken.parquet", whole))


@pytest.mark.parametrize("trace", REAL, ids=lambda p: p.name.split(".")[0])
def test_real_traces_the_same_in_windows(tmp_path, monkeypatch, trace):
    whole = _whole(trace, tmp_path / "whole.parquet")
    out = tmp_path / "windows.parquet"
    assert _windowed(monkeypatch, trace, out, REAL[trace]) >= 5
    assert differences(out, whole) == []


def test_the_analysis_of_a_windowed_import_is_the_same(tmp_path, monkeypatch):
    """End to end: `zym analyze` gives the same report (findings, savings, paths) on the
    capture imported in windows as on the one imported whole (but for the ids of paths and
    sites, numbered differently, and the file's name)."""
    whole = _whole(SAMPLE, tmp_path / "whole.parquet")
    out = tmp_path / "windows.parquet"
    assert _windowed(monkeypatch, SAMPLE, out, 20_000) >= 3

    def report(capture: Path) -> dict:
        done = subprocess.run([sys.executable, "-m", "zym.cli.main", "analyze", str(capture),
                               "--format", "json", "--no-progress"],
                              capture_output=True, text=True, check=True)
        report = _without_ids(json.loads(done.stdout))
        report["capture"].pop("source")
        return report

    assert report(out) == report(whole)


def test_cli_budget(tmp_path):
    """`--memory-budget`: a size; a bad one is a one-line error and exit 2; a budget the
    sample does not fit in imports it in windows, with the same content."""
    def zym(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "zym.cli.main", "import", str(SAMPLE),
                               *args], check=False, capture_output=True, text=True)

    for bad in ("12x", "-1", "0", "G"):
        done = zym("-o", str(tmp_path / "bad.parquet"), "--memory-budget", bad)
        assert done.returncode == 2 and "--memory-budget" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "bad.parquet").exists()
    # 300 MB for the process, ~48 k events a window: the sample's 165 k events in several
    small = kineto_stream.BASELINE_BYTES + 48_000 * kineto_stream.BYTES_PER_EVENT
    done = zym("-o", str(tmp_path / "w.parquet"), "--memory-budget", str(small))
    assert done.returncode == 0, done.stderr
    out_of_core = open_capture(tmp_path / "w.parquet").meta.extra["imported_in_windows"]
    raw = json.loads(gzip.decompress(SAMPLE.read_bytes()))["traceEvents"]
    read = {"python_function", "cpu_op", "user_annotation", "cuda_runtime", "cuda_driver",
            "kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"}
    events = sum(e.get("ph") == "X" and e.get("cat") in read for e in raw)
    assert out_of_core == {"events": events, "budget_bytes": small}
    whole = open_capture(_whole(SAMPLE, tmp_path / "m.parquet")).meta.extra
    assert "imported_in_windows" not in whole
    assert differences(tmp_path / "w.parquet", tmp_path / "m.parquet") == []
    assert not list(tmp_path.glob(".zym-spill-*"))


def test_sizes():
    for text, size in (("1G", 1 << 30), ("512M", 512 << 20), ("2.5GiB", 5 << 29), ("1 g", 1 << 30),
                       ("800000000", 800_000_000), ("64KB", 65_536), ("1T", 1 << 40)):
        assert kineto_stream.parse_size(text) == size, text
    for bad in ("", "G", "12x", "-1", "0", "inf", "nan", "1GG"):
        with pytest.raises(ValueError):
            kineto_stream.parse_size(bad)


def test_bad_time_in_a_spilled_trace_is_input_error(tmp_path, monkeypatch):
    """A timestamp the importer cannot hold is the same one-line input error when it is met
    while spilling, and the spill is removed."""
    b = KinetoBuilder()
    with b.py("app.py(1): main"):
        for _ in range(50):
            with b.op("aten::add"):
                b.launch()
    trace = b.trace()
    trace["traceEvents"][-5]["ts"] = -3.0
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(trace))
    monkeypatch.setattr(kineto_stream, "window_events", lambda budget: 20)
    from zym.schemas.errors import InputError

    with pytest.raises(InputError, match="unusable torch.profiler trace.*timestamp"):
        import_kineto(path, tmp_path / "out.parquet", budget=1)
    assert not list(tmp_path.glob(".zym-spill-*"))
    assert not (tmp_path / "out.parquet").exists()


def test_window_sizes_follow_the_memory_an_event_took(monkeypatch):
    """The first window takes half the budget's events; later ones as many sub-windows as the
    memory left (budget - resident now) holds at the most an event has cost, at least one."""
    sizer = kineto_stream._Sizer(budget=1000 << 20, rows=1_000_000)
    subs = [250_000] * 8
    assert sizer.take(subs) == 2  # 500 k events: half of the budget's million
    marks = iter([(200, 200), (200, 800)])  # resident, high-water mark (MB): start, end
    monkeypatch.setattr(kineto_stream, "reset_peak", lambda: True)
    monkeypatch.setattr(kineto_stream, "resident_mb", lambda: next(marks))
    sizer.begin()
    sizer.end(events=500_000)  # 600 MB over 500 k events: 1.2 kB an event
    assert sizer.per_event_mb == 600 / 500_000
    monkeypatch.setattr(kineto_stream, "resident_mb", lambda: (400, 900))
    # room 600 MB / 1.2 kB = 500 k events: two sub-windows, not a third
    assert sizer.take(subs) == 2
    monkeypatch.setattr(kineto_stream, "resident_mb", lambda: (990, 990))
    assert sizer.take(subs) == 1  # no room: one sub-window all the same
    monkeypatch.setattr(kineto_stream, "resident_mb", lambda: (100, 100))
    assert sizer.take([100_000] * 20) == 7  # 900 MB / 1.2 kB = 750 k: 7 of 100 k


def test_sigterm_during_an_out_of_core_import_leaves_nothing(tmp_path):
    """SIGTERM while the trace is being spilled or built window by window: a one-line
    message, no capture, no spill folder (the smallest budget: a window of 1,000 events, so
    the bundled trace takes seconds)."""
    import signal
    import time

    out = tmp_path / "out.parquet"
    proc = subprocess.Popen([sys.executable, "-m", "zym.cli.main", "import", str(SAMPLE),
                             "-o", str(out), "--memory-budget", "1"],
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".zym-spill-*/call-*.parquet")):
        assert proc.poll() is None, "the import ended before it spilled"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "terminated" in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    assert not list(tmp_path.iterdir())


ROUTED = """
import json, sys
from zym.capture import kineto_stream
from zym.analysis import analyze
from zym.analysis.export.summary import build_report
from zym.rules import evaluate, load_packs
kineto_stream.analyze_in_memory_events = lambda: int(sys.argv[2])
kineto_stream.window_events = lambda budget: 20_000
said = []
result = analyze(sys.argv[1], said.append)
report = build_report(result, evaluate(result, load_packs(()), ()), None, 5, None)
print(json.dumps({"report": report, "said": said}, default=str))
"""


def test_analyze_imports_a_large_trace_out_of_core_first(tmp_path):
    """`zym analyze TRACE.json` past ``analyze_in_memory_events()`` decoded events imports
    the trace out of core into a temporary capture and analyses that: the same report as in
    memory (but for path and site ids), and the temporary folder is gone when the process
    ends."""
    def run(events: int) -> dict:
        done = subprocess.run([sys.executable, "-c", ROUTED, str(SAMPLE), str(events)],
                              capture_output=True, text=True, check=True,
                              env={**os.environ, "TMPDIR": str(tmp_path)})
        return json.loads(done.stdout)

    routed, in_memory = run(50_000), run(10**9)
    assert any(s.startswith("building window") for s in routed["said"])
    assert not any(s.startswith("building window") for s in in_memory["said"])
    assert routed["report"]["capture"]["source"] == str(SAMPLE)
    assert _without_ids(routed["report"]) == _without_ids(in_memory["report"])
    assert not list(tmp_path.iterdir())


def test_analyze_keeps_a_trace_in_memory_while_half_the_available_memory_holds_it(
        monkeypatch, tmp_path):
    """The threshold: half of MemAvailable at ANALYZE_BYTES_PER_EVENT an event, never below
    the floor; without /proc/meminfo, four times the floor."""
    real_open = open

    def meminfo(kb):
        def fake(path, *a, **k):
            if path == "/proc/meminfo":
                text = tmp_path / "meminfo"
                text.write_text(f"MemTotal: 99 kB\nMemAvailable: {kb} kB\n")
                return real_open(text, *a, **k)
            return real_open(path, *a, **k)
        return fake

    per = kineto_stream.ANALYZE_BYTES_PER_EVENT
    monkeypatch.setattr("builtins.open", meminfo(20 * 1024 * 1024))  # 20 GiB
    assert kineto_stream.analyze_in_memory_events() == (20 << 30) // 2 // per
    monkeypatch.setattr("builtins.open", meminfo(1024))  # 1 MiB: the floor
    assert kineto_stream.analyze_in_memory_events() == kineto_stream.ANALYZE_IN_MEMORY_EVENTS

    def missing(path, *a, **k):
        if path == "/proc/meminfo":
            raise FileNotFoundError(path)
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", missing)
    assert kineto_stream.analyze_in_memory_events() == 4 * kineto_stream.ANALYZE_IN_MEMORY_EVENTS
