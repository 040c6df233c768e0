"""A sampled analysis names every line of the capture that syncs or copies, also those outside
its slices (``zym.analysis.census``), with the whole capture's counts."""
from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from console import console
from zym.analysis import analyze
from zym.analysis import budget as B
from zym.rules.testing import CaptureBuilder
from zym.schemas.io import open_capture

BATCH = [("python", "serve", "srv.py", 5), ("python", "handle_batch", "srv.py", 30)]
REQUESTS = 240
# request 1 lies in the first slice; request 111 at 0.7 of the fourth of eight equal parts,
# past the slice at its start (30% of the part), and a cut at the steps only shortens a slice
RARE = (1, 111)


def _server(path: Path, copies: tuple[int, ...] = RARE,
            flushes: dict[int, int] | None = None) -> Path:
    """A decode server whose requests all read a scalar back at srv.py:41; the requests of
    ``copies`` also copy a tensor to the host at a line of their own (``log<request>``), and
    each request of ``flushes`` runs a kernel and waits for it (``cudaDeviceSynchronize``, at
    srv.py:71 ``flush``) as many times as it says."""
    b = CaptureBuilder()
    for r in range(REQUESTS):
        with b.enclosing(BATCH):
            for _ in range(6):
                b.kernel(BATCH + [("python", "forward", "model.py", 12),
                                  ("torch_op", "aten::mm")], "gemm", gpu_us=40)
            b.scalar_readback(BATCH + [("python", "decode", "srv.py", 41)])
            if r in copies:
                b.copy(BATCH + [("python", f"log{r}", "srv.py", 90 + r)], "DtoH", nbytes=4096)
            for _ in range((flushes or {}).get(r, 0)):
                b.kernel(BATCH + [("python", "flush", "srv.py", 70)], "drain", gpu_us=50)
                b.call(BATCH + [("python", "flush", "srv.py", 71)], "cudaDeviceSynchronize",
                       "sync", until_ns=b.now + 50_000)
            b.tick(30)
        b.tick(60)
    return b.write(path)


def _raw_lines(path: Path) -> dict[str, dict]:
    """Per user function at the leaf of a call's Python frames, read with pyarrow (not zym's
    reader nor its stack walk): calls by API name with their summed durations, and the times
    the calls start."""
    rows = pq.read_table(path, columns=["record", "frame_id", "kind", "name", "stack_id",
                                        "parent_id", "ts_ns", "dur_ns"]).to_pylist()
    frames = {r["frame_id"]: r for r in rows if r["record"] == "frame"}
    stacks = {r["stack_id"]: r for r in rows if r["record"] == "stack"}

    def user_function(stack_id):
        found, node = None, stacks.get(stack_id)
        while node is not None:  # leaf to root: the innermost Python frame wins
            frame = frames[node["frame_id"]]
            if found is None and frame["kind"] == "python":
                found = frame["name"]
            node = stacks.get(node["parent_id"])
        return found

    out: dict[str, dict] = {}
    for r in rows:
        if r["record"] == "call":
            line = out.setdefault(user_function(r["stack_id"]),
                                  {"calls": Counter(), "ns": Counter(), "ts": []})
            line["calls"][r["name"]] += 1
            line["ns"][r["name"]] += r["dur_ns"]
            line["ts"].append(r["ts_ns"])
    return out


def test_a_sampled_analysis_names_the_lines_outside_its_sample(tmp_path):
    path = _server(tmp_path / "c.parquet")
    cap = open_capture(path)
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    a = analyze(path, budget=B.estimate_bytes({t: n * 0.3 for t, n in rows.items()}))
    assert a.sample is not None
    raw = _raw_lines(path)
    slices = a.sample.slices

    def inside(ts):
        return any(lo <= t < hi for t in ts for lo, hi in slices)

    # the premise: one rare line's calls lie in a slice, the other's in none
    assert inside(raw["log1"]["ts"]) and not inside(raw["log111"]["ts"])
    lines = a.sample_facts()["sync_copy_lines"]
    # three lines sync or copy (the scalar read-back's and the two rare ones); the sample
    # holds two of them
    assert (lines["capture"], lines["sample"]) == (3, 2)
    (out,) = lines["outside"]
    assert (out["site"], out["file"], out["line"], out["function"]) == (
        "srv.py:201 log111", "srv.py", 201, "log111")
    calls, ns = raw["log111"]["calls"], raw["log111"]["ns"]
    assert calls == Counter({"cudaMemcpyAsync": 1, "cudaStreamSynchronize": 1})
    assert (out["copies"], out["copy_ns"]) == (1, ns["cudaMemcpyAsync"])
    assert (out["syncs"], out["sync_ns"]) == (1, ns["cudaStreamSynchronize"])
    # the whole capture's analysis has no such section; its own findings name the line
    whole = analyze(path)
    assert whole.sample_facts() is None and "sample" not in whole.to_dict()


def test_every_output_names_the_lines_outside_the_sample(tmp_path):
    path = _server(tmp_path / "c.parquet")
    raw = _raw_lines(path)
    args = ("analyze", str(path), "--memory-budget", "1K", "--no-progress")
    report = json.loads(console((), *args, "--format", "json").stdout)
    lines = report["sample"]["sync_copy_lines"]
    # a sample of a thousandth of the time holds none of them: every one is named, the
    # costliest first, with the capture's counts
    assert lines["sample"] == 0 and lines["capture"] == 3
    assert [x["function"] for x in lines["outside"]] == ["decode", "log111", "log1"]
    decode = lines["outside"][0]
    assert decode["syncs"] == raw["decode"]["calls"]["cudaStreamSynchronize"] == REQUESTS
    assert decode["copies"] == raw["decode"]["calls"]["cudaMemcpyAsync"] == REQUESTS
    assert decode["sync_ns"] == raw["decode"]["ns"]["cudaStreamSynchronize"]
    text = " ".join(console((), *args).stdout.split())
    assert ("the capture has 3 lines that sync or copy outside the sample (in no figure below; "
            "the whole capture's counts): srv.py:41 decode (240 syncs, ") in text
    # its time as a share of the capture's (the span of its calls' starts), from the raw rows
    starts = [t for line in raw.values() for t in line["ts"]]
    assert lines["capture_ns"] == max(starts) - min(starts) + 1
    share = 100 * (raw["log111"]["ns"]["cudaStreamSynchronize"]
                   + raw["log111"]["ns"]["cudaMemcpyAsync"]) / lines["capture_ns"]
    said = f"srv.py:201 log111 (1 sync, 2 µs; 1 copy, 4 µs: {share:.2g}% of the capture's time)"
    assert said in text
    md = console((), *args, "-f", "markdown").stdout
    assert said.replace(".", "\\.").replace("(", "\\(").replace(")", "\\)") in md
    page = tmp_path / "r.html"
    got = console((), "report", str(path), "--memory-budget", "1K", "-o", str(page), "--no-progress")
    assert got.returncode == 0, got.stderr
    assert "<th>Outside the sample</th><td>the capture has 3 lines" in page.read_text()
    # the whole capture: nothing said
    assert "outside the sample" not in console((), "analyze", str(path), "--no-progress").stdout


@pytest.mark.parametrize("shown", [1, 3])
def test_the_line_names_the_costliest_and_counts_the_rest(shown):
    from zym.analysis.export.summary import outside_sample_line

    def line(name, syncs, copies):
        return {"site": name, "syncs": syncs, "sync_ns": 1000 * syncs, "copies": copies,
                "copy_ns": 2000 * copies}

    sample = {"sync_copy_lines": {"capture": 4, "sample": 1, "outside": [
        line("a.py:1 f", 2, 0), line("b.py:2 g", 0, 1), line("c.py:3 h", 1, 3)]}}
    said = outside_sample_line(sample, shown)
    assert said.startswith("the capture has 3 lines that sync or copy outside the sample")
    assert "a.py:1 f (2 syncs, 2 µs)" in said
    assert ("b.py:2 g (1 copy, 2 µs)" in said) == (shown == 3)
    assert said.endswith(", and 2 more") == (shown == 1)
    # with the capture's length: each line's time as a share of it
    sample["sync_copy_lines"]["capture_ns"] = 1_000_000
    assert "c.py:3 h (1 sync, 1 µs; 3 copies, 6 µs: 0.7% of the capture's time)" in \
        outside_sample_line(sample, 3)
    assert outside_sample_line({"sync_copy_lines": {"capture": 1, "sample": 1,
                                                    "outside": []}}) is None
    assert outside_sample_line({}) is None


def _varied_shapes(path: Path, steps: int = 240, repeats: int = 4) -> Path:
    """A launch-bound server whose batch shape varies: each of ``steps / repeats`` grids is
    launched by ``repeats`` steps, in a shuffled order, and every tenth step has a shape of its
    own (a grid no other step launches)."""
    grids = [1 + i // repeats for i in range(steps)]
    random.Random(0).shuffle(grids)
    b = CaptureBuilder()
    for i in range(steps):
        grid = 1000 + i if i % 10 == 5 else grids[i]
        with b.enclosing(BATCH):
            for _ in range(24):
                b.kernel(BATCH + [("python", "forward", "model.py", 12)], "gemm", gpu_us=2,
                         grid=grid)
            b.scalar_readback(BATCH + [("python", "decode", "srv.py", 41)])
        b.tick(20)
    return b.write(path)


def _graph_share(analysis) -> float:
    from zym.rules import evaluate, load_packs

    (f,) = [f for f in evaluate(analysis, load_packs(()), ())
            if f.rule_id == "compute.launch-bound-step"]
    return f.saving_ns / analysis.facts.window_ns


def test_a_samples_graph_estimate_counts_the_shapes_the_capture_repeats(tmp_path, monkeypatch):
    """A sample holds most of the capture's shapes once; the CUDA-graph estimate replays a step
    as a graph where the whole capture repeats its shape (its kernels' grids run at least
    twice as often as in the step), not only where the sample does: the sample's share of the
    window saved is the whole's, where counting repeats in the sample alone gave much less."""
    from zym.analysis.report import Analysis

    path = _varied_shapes(tmp_path / "c.parquet")
    cap = open_capture(path)
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    budget = B.estimate_bytes({t: n * 0.3 for t, n in rows.items()})
    whole = _graph_share(analyze(path))
    sampled = analyze(path, budget=budget)
    assert sampled.sample is not None and sampled.phases.steps.count >= 40
    assert _graph_share(sampled) == pytest.approx(whole, rel=0.1)
    # the shapes held once in the sample but repeated in the capture are most of the sample:
    # without the capture's counts the estimate falls far short of the whole's
    monkeypatch.setattr(Analysis, "capture_launches", property(lambda self: None))
    alone = _graph_share(analyze(path, budget=budget))
    assert alone < 0.8 * whole


# a flush that syncs once after request 1 and ten times after each of requests 108-111: the
# burst lies between two slices of a sample of 30% (the fourth's end and the fifth's start)
BURST = {1: 1} | dict.fromkeys(range(108, 112), 10)


def test_a_line_the_sample_holds_short_is_named_with_both_counts(tmp_path):
    path = _server(tmp_path / "c.parquet", copies=(), flushes=BURST)
    cap = open_capture(path)
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    a = analyze(path, budget=B.estimate_bytes({t: n * 0.3 for t, n in rows.items()}))
    raw = _raw_lines(path)
    slices = a.sample.slices

    def inside(t):
        return any(lo <= t < hi for lo, hi in slices)

    flush = raw["flush"]
    held = [t for t in flush["ts"] if inside(t)]
    # the premise: the sample holds the flush after request 1 and none of the burst
    assert 0 < len(held) < 0.2 * len(flush["ts"])
    lines = a.sample_facts()["sync_copy_lines"]
    assert lines["outside"] == []
    (short,) = lines["short"]
    assert short["site"] == "srv.py:71 flush"
    assert short["syncs"] == flush["calls"]["cudaDeviceSynchronize"] == 41
    assert short["sync_ns"] == flush["ns"]["cudaDeviceSynchronize"]
    assert short["sample_syncs"] == len(held) // 2  # (each flush: a launch and a sync)
    assert lines["sample_ns"] == sum(hi - lo for lo, hi in slices)
    from zym.analysis.export.summary import short_sample_line

    said = short_sample_line(a.sample_facts())
    assert said.startswith("the sample holds 1 line short: its syncs and copies take a larger "
                           "share of the capture's time than of the sample's")
    assert "srv.py:71 flush (the capture: 41 syncs, " in said
    # the decode line, in every request, is held in proportion: not named
    assert "decode" not in said
    # every output says it
    budget = str(B.estimate_bytes({t: n * 0.3 for t, n in rows.items()}))
    args = ("analyze", str(path), "--memory-budget", budget, "--no-progress")
    assert "the sample holds 1 line short" in " ".join(console((), *args).stdout.split())
    assert "the sample holds 1 line short" in console((), *args, "-f", "markdown").stdout
    page = tmp_path / "r.html"
    console((), "report", str(path), "--memory-budget", budget, "-o", str(page), "--no-progress")
    assert "<th>Held short by the sample</th><td>the sample holds 1 line short" in \
        page.read_text()


def test_a_sampled_analysis_checks_each_file_once(tmp_path, monkeypatch):
    """The capture is opened (its content hashed: the whole file read) once, and the sample
    once after its last copy, also where the census and the graph estimate read them again
    (the sample's first copy, which the steps are found in, is opened before it is copied
    again)."""
    from zym.schemas import io

    path = _server(tmp_path / "c.parquet", copies=(), flushes=BURST)
    cap = open_capture(path)
    rows = {t: cap.rows(t) for t in B.SAMPLED_TABLES}
    seen: list[str] = []
    checked, copied = io.verify, B.write_sample
    monkeypatch.setattr(io, "verify", lambda p, v: (seen.append(Path(p).name),
                                                    checked(p, v))[1])
    monkeypatch.setattr(B, "write_sample", lambda *a, **k: (seen.append("copy"),
                                                            copied(*a, **k))[1])
    a = analyze(path, budget=B.estimate_bytes({t: n * 0.3 for t, n in rows.items()}))
    a.sample_facts()
    assert a.capture_launches is not None  # (the capture read again, not opened again)
    last = len(seen) - seen[::-1].index("copy")
    assert seen.count("c.parquet") == 1 and seen[last:] == ["sample.parquet"]
