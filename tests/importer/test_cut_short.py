"""A torch.profiler trace cut short (its writer killed while it wrote, a full disk, a copy
stopped) is read up to its last whole event, clipped where every group of events is still
whole, and says so. The expected events are found here by a second method: the stdlib's
``json.JSONDecoder.raw_decode`` walking the events one object at a time over the text before
the cut, on real H200 traces of different services."""
from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner
from zym.capture import kineto_stream
from zym.capture.kineto import import_kineto, load_kineto
from zym.cli.main import app
from zym.schemas.errors import InputError
from zym.schemas.io import open_capture

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"
H200 = REPO / "bench" / "whatif" / "results"
TRACES = [SAMPLE, H200 / "h200-threads" / "sidecar.trace.json.gz",
          H200 / "h200-varied" / "compiled.trace.json.gz",
          H200 / "h200-varied" / "moe-nostack.trace.json.gz"]
GROUP = {"python_function": "python", "cpu_op": "op", "user_annotation": "op",
         "cuda_runtime": "call", "cuda_driver": "call", "kernel": "gpu",
         "gpu_memcpy": "gpu", "gpu_memset": "gpu", "cuda_sync": "gpu"}


def whole_events(text: bytes) -> list[tuple[dict, int]]:
    """Each event of ``text`` (a Kineto trace, perhaps cut) that is whole, with the offset
    where its text ends: a plain walk of the ``traceEvents`` array, one object at a time."""
    s = text.decode("latin-1")  # one character a byte: offsets in the text are in bytes
    at = s.index("[", s.index('"traceEvents"')) + 1
    decoder, out = json.JSONDecoder(), []
    while True:
        while at < len(s) and s[at] in " \t\r\n,":
            at += 1
        if at >= len(s) or s[at] != "{":
            return out
        try:
            event, end = decoder.raw_decode(s, at)
        except json.JSONDecodeError:
            return out
        out.append((event, end))
        at = end


def expected(events: list[dict]) -> tuple[float, dict[str, int]]:
    """Where every group is still whole (the earliest of the groups' last starts) and the
    GPU operations by kind that start up to there."""
    last: dict[str, float] = {}
    for e in events:
        g = GROUP.get(e.get("cat"))
        if g is not None and "ts" in e:
            last[g] = max(last.get(g, float("-inf")), float(e["ts"]))
    until = min(last.values())
    kinds = {"kernel": "kernel", "gpu_memcpy": "copy", "gpu_memset": "memset"}
    counts = {k: 0 for k in kinds.values()}
    for e in events:
        if e.get("cat") in kinds and e.get("ph") == "X" and float(e["ts"]) <= until:
            counts[kinds[e["cat"]]] += 1
    return until, counts


def gpu_counts(tables: dict) -> dict[str, int]:
    gpu = tables["gpu"]
    return {k: int((gpu["kind"] == k).sum()) for k in ("kernel", "copy", "memset")}


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.name.split(".")[0])
def trace(request) -> tuple[bytes, list[tuple[dict, int]]]:
    """A trace's text and its events with where each ends (a prefix of the text holds those
    that end inside it)."""
    text = gzip.decompress(request.param.read_bytes())
    return text, whole_events(text)


@pytest.fixture(scope="module")
def sample() -> tuple[bytes, list[tuple[dict, int]]]:
    text = gzip.decompress(SAMPLE.read_bytes())
    return text, whole_events(text)


@pytest.mark.parametrize("at", [0.8, 0.93, 0.995])
def test_a_cut_inside_the_events_keeps_every_whole_event_before_the_frontier(tmp_path, trace,
                                                                             at):
    text, every = trace
    cut = int(len(text) * at)
    path = tmp_path / "cut.json"
    path.write_bytes(text[:cut])
    events = [e for e, end in every if end <= cut]
    until, counts = expected(events)
    tables, meta = load_kineto(path)
    said = meta.extra["cut_short"]
    assert said["lost"] in ("an event", "nothing") and not said["gzip_cut"]
    assert said["text_bytes_read"] == cut
    assert said["complete_until_ns"] == pytest.approx(until * 1000, abs=1)
    assert gpu_counts(tables) == counts
    assert int(tables["gpu"]["ts_ns"].max()) <= said["complete_until_ns"]


def test_a_gzip_stream_cut_short_reads_what_it_holds(tmp_path, trace):
    text, every = trace
    packed = gzip.compress(text)
    cut_gz = packed[:int(len(packed) * 0.9)]
    path = tmp_path / "cut.json.gz"
    path.write_bytes(cut_gz)
    d = zlib.decompressobj(wbits=31)
    prefix = d.decompress(cut_gz)  # what the stdlib's zlib gets out of the cut stream
    assert not d.eof
    assert text.startswith(prefix)
    until, counts = expected([e for e, end in every if end <= len(prefix)])
    tables, meta = load_kineto(path)
    said = meta.extra["cut_short"]
    assert said["gzip_cut"] and said["complete_until_ns"] == pytest.approx(until * 1000, abs=1)
    assert gpu_counts(tables) == counts


def test_a_cut_after_the_events_keeps_them_all_unclipped(tmp_path, trace):
    text, _ = trace
    close = text.rindex(b"]")
    path = tmp_path / "cut.json"
    path.write_bytes(text[:close + 1] + b',\n  "traceNa')
    whole, _ = load_kineto(_write(tmp_path / "whole.json", text))
    tables, meta = load_kineto(path)
    said = meta.extra["cut_short"]
    assert said["lost"] == "the keys after its events" and "complete_until_ns" not in said
    assert {t: tables[t].height for t in tables} == {t: whole[t].height for t in whole}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_bare_array_may_leave_out_its_closing_bracket(tmp_path):
    events = json.loads(gzip.decompress(SAMPLE.read_bytes()))["traceEvents"]
    closed = json.dumps(events).encode()
    assert closed.endswith(b"]")
    whole, whole_meta = load_kineto(_write(tmp_path / "closed.json", closed))
    for tail in (b"", b",", b",\n  "):  # the JSON Array Format's "]" is optional
        tables, meta = load_kineto(_write(tmp_path / "open.json", closed[:-1] + tail))
        assert "cut_short" not in meta.extra and "cut_short" not in whole_meta.extra
        assert {t: tables[t].height for t in tables} == {t: whole[t].height for t in whole}


def test_trailing_garbage_is_not_taken_for_a_cut(tmp_path):
    text = gzip.decompress(SAMPLE.read_bytes())
    with pytest.raises(InputError, match="not valid JSON"):
        load_kineto(_write(tmp_path / "t.json", text + b"\n\x00garbage"))
    with pytest.raises(InputError, match="cut short before its first whole event"):
        start = text.index(b"{", text.index(b"[", text.index(b'"traceEvents"')))
        load_kineto(_write(tmp_path / "early.json", text[:start + 30]))


def test_out_of_core_import_of_a_cut_trace_is_the_in_memory_one(tmp_path, monkeypatch):
    text = gzip.decompress(SAMPLE.read_bytes())
    path = _write(tmp_path / "cut.json", text[:int(len(text) * 0.9)])
    whole = import_kineto(path, tmp_path / "mem.parquet", budget=1 << 40)
    monkeypatch.setattr(kineto_stream, "window_events", lambda budget: 12_000)
    said: list[str] = []
    windowed = import_kineto(path, tmp_path / "win.parquet", said.append, budget=1)
    assert sum(s.startswith("building window") for s in said) > 1
    a, b = open_capture(whole), open_capture(windowed)
    assert a.meta.extra["cut_short"]["complete_until_ns"] == \
        b.meta.extra["cut_short"]["complete_until_ns"]
    for table in ("call", "gpu"):
        assert a.rows(table) == b.rows(table)


def test_zym_analyze_says_so_and_leaves_out_the_step_it_cut(tmp_path, sample):
    text, every = sample
    cut = int(len(text) * 0.93)
    path = _write(tmp_path / "cut.json", text[:cut])
    until, _ = expected([e for e, end in every if end <= cut])
    steps = [e for e, _ in every
             if e.get("cat") == "python_function" and e["name"].endswith("handle_batch")]
    whole_steps = sum(float(e["ts"]) + float(e["dur"]) <= until for e in steps)
    assert 0 < whole_steps < len(steps)
    runner = CliRunner()
    got = runner.invoke(app, ["analyze", str(path), "--format", "json", "--no-progress"],
                        catch_exceptions=False)
    assert got.exit_code == 0, got.stderr
    report = json.loads(got.stdout)
    assert report["capture"]["cut_short"]["lost"] == "an event"
    assert report["phases"]["steps"]["found"] == whole_steps
    text_out = runner.invoke(app, ["analyze", str(path), "--no-progress"],
                             catch_exceptions=False)
    assert text_out.exit_code == 0 and "CUT SHORT: the trace ends inside an event" in \
        text_out.stdout


def test_zym_diff_of_a_cut_trace_names_the_cut_and_its_steps_match(tmp_path, sample):
    """A cut trace against its whole: the diff says which side was cut, and its per-step
    GPU time is the whole's within noise (the cut keeps whole steps only)."""
    text, _ = sample
    whole = _write(tmp_path / "whole.json", text)
    cut = _write(tmp_path / "cut.json", text[:int(len(text) * 0.93)])
    got = CliRunner().invoke(app, ["diff", str(whole), str(cut), "--format", "json",
                                   "--no-progress"], catch_exceptions=False)
    assert got.exit_code == 0, got.stderr
    d = json.loads(got.stdout)
    assert "cut_short" not in d["before"] and d["after"]["cut_short"]["lost"] == "an event"
    totals = {t["measure"]: t for t in d["totals"]}
    assert not totals["gpu_ns"]["above_noise"] and not totals["calls"]["above_noise"], totals
    assert abs(totals["gpu_ns"]["delta_pct"]) < 2, totals["gpu_ns"]


def test_export_and_report_of_a_cut_trace(tmp_path, sample):
    """`zym export` writes what was read; `zym report`'s page says the trace was cut."""
    text, _ = sample
    cut = _write(tmp_path / "cut.json", text[:int(len(text) * 0.93)])
    runner = CliRunner()
    out = runner.invoke(app, ["export", str(cut), "-o", str(tmp_path / "t.pftrace"),
                              "--no-progress"], catch_exceptions=False)
    assert out.exit_code == 0 and (tmp_path / "t.pftrace").stat().st_size > 0, out.stderr
    page = runner.invoke(app, ["report", str(cut), "-o", str(tmp_path / "r.html"),
                               "--no-progress"], catch_exceptions=False)
    assert page.exit_code == 0, page.stderr
    assert "Cut short</th><td>CUT SHORT: the trace ends inside an event" in \
        (tmp_path / "r.html").read_text()


def test_zym_import_warns_and_markdown_says_it(tmp_path, sample):
    """`zym import` of a cut trace writes the capture and warns on stderr, once; the
    capture keeps where it was cut, and the Markdown report opens with it."""
    text, _ = sample
    cut = _write(tmp_path / "cut.json", text[:int(len(text) * 0.93)])
    out = tmp_path / "cut.parquet"
    runner = CliRunner()
    got = runner.invoke(app, ["import", str(cut), "-o", str(out), "--no-progress"],
                        catch_exceptions=False)
    assert got.exit_code == 0, got.stderr
    assert got.stderr.count("zym: warning:") == 1 and "CUT SHORT" in got.stderr
    assert open_capture(out).meta.extra["cut_short"]["lost"] == "an event"
    whole = runner.invoke(app, ["import", str(_write(tmp_path / "w.json", text)), "-o",
                                str(tmp_path / "w.parquet"), "--no-progress"])
    assert whole.exit_code == 0 and "warning" not in whole.stderr
    md = runner.invoke(app, ["analyze", str(out), "--format", "markdown", "--no-progress"],
                       catch_exceptions=False)
    assert md.exit_code == 0 and "**CUT SHORT: the trace ends inside an event" in md.stdout
