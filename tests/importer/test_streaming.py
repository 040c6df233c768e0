"""Streaming JSON decoding: any layout of a trace, cut into batches anywhere, gives the columns
that ``json.load`` of the same text gives (an independent decoder), and the same tables."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import polars as pl
import pytest
from zym.capture import kineto_json
from zym.capture.kineto import load_kineto
from zym.schemas import InputError

# Names that look like the text between events, or close arrays and objects, inside strings.
TRICKY = ['a},{b', 'x}, {"ph": "X"}', "]", "},\n  {", 'say "hi"', "back\\slash", "é ☃ \u2603",
          "tab\there"]


def random_events(seed: int, n: int = 400, tricky: bool = True) -> list[dict]:
    """Complete events of every category zym reads, and others it skips (flows, metadata,
    Kineto's own spans), with nested args of varying depth (``tricky``: and names and args
    holding the text between two events, or arrays of objects)."""
    rng = random.Random(seed)
    events, ts = [], 1_000_000.0
    for i in range(n):
        ts += rng.choice([0.5, 1.25, 3.001])
        kind = rng.choice(["python_function", "cpu_op", "user_annotation", "cuda_runtime",
                           "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset", "ac2g", "meta",
                           "Trace", "overhead"])
        name = rng.choice((TRICKY if tricky else [])
                          + [f"aten::op{i % 7}", f"app.py({i % 5}): f{i % 3}"])
        ev: dict = {"ph": "X", "cat": kind, "name": name, "pid": rng.choice([1, 2]),
                    "tid": rng.choice([1, 3]), "ts": ts, "dur": rng.choice([0, 0.25, 2.5])}
        if kind == "python_function":
            ev["args"] = {"Python id": i, "Python parent id": rng.choice([None, i - 1])}
        elif kind in ("cpu_op", "user_annotation"):
            ev["args"] = {"External id": i, "Record function id": 0,
                          "Input Dims": rng.choice([[[4, 8], [8]], [[[1], [2]], [], [3]], []]),
                          "Input type": rng.choice([["float", "TensorList"], ["c10::Half"]]),
                          "Concrete Inputs": ["", "[1, 2]"]}
            if tricky:
                ev["args"]["nested"] = [{"a": {"b": [{}]}}, {"c": "},{"}]
        elif kind in ("cuda_runtime", "cuda_driver"):
            ev["args"] = {"External id": i - 1, "cbid": 211, "correlation": i}
        elif kind in ("kernel", "gpu_memcpy", "gpu_memset"):
            ev["args"] = {"External id": i - 2, "device": 0, "stream": 7, "correlation": i - 1,
                          "bytes": 4096, "grid": [i % 9 + 1, 1, 1], "block": [128, 1, 1],
                          "queued": 0, "blocks per SM": 0.5}
        elif kind == "ac2g":
            ev = {"ph": rng.choice("sf"), "id": i, "pid": 1, "tid": 1, "ts": ts, "cat": "ac2g",
                  "name": "ac2g"}
        elif kind == "meta":
            ev = {"name": "process_name", "ph": "M", "ts": ts, "pid": 1, "tid": 0,
                  "args": {"name": "python3"}}
        elif kind == "Trace":
            ev.update(pid="Spans", tid="PyTorch Profiler", args={"Op count": 0})
        events.append(ev)
    return events


def trace_of(events: list[dict]) -> dict:
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU"}],
            "with_stack": 1, "cuda_driver_version": 13000, "traceEvents": events,
            "traceName": "t.json", "after": [[1], {"x": "]"}]}


def layouts(trace: dict) -> dict[str, bytes]:
    """The same trace as text laid out in ways that torch.profiler and its re-exporters write."""
    kineto_like = ("{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in
                                       trace.items() if k != "traceEvents")
                   + ',\n  "traceEvents": ['
                   + ",".join("\n  {\n    " + json.dumps(e)[1:-1] + "\n  }"
                              for e in trace["traceEvents"]) + "\n  ]\n}")
    return {
        "kineto": kineto_like.encode(),
        "minified": json.dumps(trace, separators=(",", ":")).encode(),
        "spaced": json.dumps(trace).encode(),
        "indent3_sorted": json.dumps(trace, indent=3, sort_keys=True).encode(),
        "crlf_tabs": json.dumps(trace, indent="\t").replace("\n", "\r\n").encode(),
        "ascii_escapes": json.dumps(trace, ensure_ascii=True).encode(),
        "bare_array": json.dumps(trace["traceEvents"], indent=1).encode(),
    }


def expected_groups(events: list[dict]) -> dict[str, list[dict]]:
    """What zym reads of each event, derived with json (not with zym's decoder)."""
    def as_int(v):
        return v if isinstance(v, int) else None

    out: dict[str, list[dict]] = {"python": [], "op": [], "call": [], "gpu": []}
    for e in events:
        group = {"python_function": "python", "cpu_op": "op", "user_annotation": "op",
                 "cuda_runtime": "call", "cuda_driver": "call", "kernel": "gpu",
                 "gpu_memcpy": "gpu", "gpu_memset": "gpu"}.get(e.get("cat"))
        if group is None or e["ph"] != "X":
            continue
        a = e.get("args", {})
        row = {"cat": e["cat"], "name": e["name"], "pid": as_int(e["pid"]),
               "tid": as_int(e["tid"]), "ts_us": e["ts"], "dur_us": e["dur"]}
        if group == "python":
            row |= {"python_id": a["Python id"], "python_parent_id": a["Python parent id"]}
        elif group == "op":
            row |= {"external_id": a["External id"], "shape": a.get("Input Dims"),
                    "dtypes": a.get("Input type")}
        elif group == "call":
            row |= {"external_id": a["External id"], "correlation_id": a["correlation"],
                    "cbid": a["cbid"]}
        else:
            row |= {"external_id": a["External id"], "correlation_id": a["correlation"],
                    "device_id": a["device"], "stream_id": a["stream"], "size_bytes": a["bytes"],
                    "grid_x": a["grid"][0], "block_x": a["block"][0]}
        out[group].append(row)
    return out


def decoded_groups(path: Path) -> dict[str, list[dict]]:
    """zym's streamed decoding of ``path``, names and shapes resolved from their ids (decoded
    again in one thread when a batch a worker got was cut inside an event, as read_events
    does)."""
    try:
        got = kineto_json._read_streaming(path, parallel=True)
    except kineto_json._BadCut:
        got = kineto_json._read_streaming(path, parallel=False)
    assert got is not None, "decoded whole, not streamed"
    return resolved(got[0])


def resolved(groups: dict) -> dict[str, list[dict]]:
    """Groups as ``expected_groups`` writes them: names and shapes resolved from their ids."""
    names = dict(groups["names"].iter_rows())
    shapes = dict(groups["shapes"].iter_rows())
    out = {}
    for group in ("python", "op", "call", "gpu"):
        rows = []
        for r in groups[group].iter_rows(named=True):
            row = {k: r[k] for k in ("cat", "pid", "tid", "ts_us", "dur_us")}
            row["name"] = r["name"] if group == "gpu" else names[r["name_id"]]
            if group == "python":
                row |= {"python_id": r["python_id"], "python_parent_id": r["python_parent_id"]}
            elif group == "op":
                row |= {"external_id": r["external_id"],
                        "shape": None if r["shape_id"] is None else json.loads(shapes[r["shape_id"]]),
                        "dtypes": None if r["dtypes_id"] is None
                        else json.loads(shapes[r["dtypes_id"]])}
            elif group == "call":
                row |= {"external_id": r["external_id"], "correlation_id": r["correlation_id"],
                        "cbid": r["cbid"]}
            else:
                row |= {k: r[k] for k in ("external_id", "correlation_id", "device_id",
                                          "stream_id", "size_bytes", "grid_x", "block_x")}
            rows.append(row)
        out[group] = rows
    return out


@pytest.fixture(params=[False, True], ids=["batches", "tiny-batches"])
def batch_sizes(request, monkeypatch):
    """Default batches, or pieces of 97 bytes and batches of ~1 kB, the threads' too: cuts at
    most events, and pieces that end inside strings, numbers and escapes. Checked after the
    test (where the compiled decoder, whose threads take batches of _THREAD_BATCH, is
    built): most batches decoded were of a few kB (checked: with the threads' default batch,
    the first kB of a file went to a thread and the rest was one batch, of ~80 kB)."""
    if not request.param:
        yield
        return
    monkeypatch.setattr(kineto_json, "_READ_CHUNK", 97)
    monkeypatch.setattr(kineto_json, "_GZ_READ", 61)
    for name in ("_DECODE_BATCH", "_THREAD_BATCH"):
        monkeypatch.setattr(kineto_json, name, 1024)
    monkeypatch.setattr(kineto_json, "_CUT_WINDOW", 128)
    real, sizes = kineto_json._scan_frames, []

    def recording(buf, start, end, *rest):
        frames = real(buf, start, end, *rest)
        if frames is not None:  # a batch decoded (not a cut tried and refused)
            sizes.append(end - start)
        return frames

    monkeypatch.setattr(kineto_json, "_scan_frames", recording)
    yield
    if kineto_json._kineto_scan is not None and sizes:  # (damage at the start: none decodes)
        assert sorted(sizes)[len(sizes) // 2] < 4096, sizes  # most batches are small


@pytest.mark.parametrize("seed", [1, 2])
def test_every_layout_streams_to_the_columns_json_load_gives(tmp_path, seed, batch_sizes):
    events = random_events(seed)
    expected = expected_groups(json.loads(json.dumps(events)))
    assert all(expected.values())  # every group present
    for name, text in layouts(trace_of(events)).items():
        for gz in (False, True):
            path = tmp_path / f"{name}.json{'.gz' if gz else ''}"
            path.write_bytes(gzip.compress(text) if gz else text)
            assert decoded_groups(path) == expected, (name, gz)


def test_every_layout_gives_the_same_tables_and_header(tmp_path, batch_sizes):
    trace = trace_of(random_events(3))
    first = None
    for name, text in layouts(trace).items():
        path = tmp_path / f"{name}.json"
        path.write_bytes(text)
        tables, meta = load_kineto(path)
        if name != "bare_array":  # a bare array has no header
            assert meta.gpus == [{"id": 0, "name": "Test GPU"}], name
            assert meta.driver_version == "13.0", name
        if first is None:
            first = tables
            assert tables["call"].height == len(expected_groups(trace["traceEvents"])["call"])
        for table, frame in first.items():
            assert same_content(tables[table], frame), (name, table)


def same_content(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    """Equal tables; shapes and dtypes are the trace's own JSON text, so they are compared
    as JSON values (a minified trace spaces them otherwise)."""
    shapes = [c for c in ("op_shapes", "op_dtypes") if c in a.columns]
    if not a.drop(shapes).equals(b.drop(shapes)):
        return False
    return all([None if v is None else json.loads(v) for v in a[c]]
               == [None if v is None else json.loads(v) for v in b[c]] for c in shapes)


def test_concatenated_gzip_members_and_an_empty_event_array(tmp_path):
    text = json.dumps(trace_of(random_events(4))).encode()
    path = tmp_path / "two_members.json.gz"
    path.write_bytes(gzip.compress(text[:1000]) + gzip.compress(text[1000:]))
    assert decoded_groups(path) == expected_groups(random_events(4))
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"traceEvents": [], "traceName": "x"}))
    with pytest.raises(InputError, match="no torch.profiler events"):
        load_kineto(empty)


def test_text_the_gunzip_holds_back_is_read_before_a_cut(tmp_path, monkeypatch):
    """ISA-L can take all the input it is given and hold back the text past a piece's cap:
    at the end of a gzip stream cut short, that text is asked for before the stream is taken
    as ending there (pieces of at most 97 bytes here: the last input holds text back), so
    the same events are read as with the default pieces."""
    text = json.dumps(trace_of(random_events(16, tricky=False))).encode()
    data = gzip.compress(text)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[:len(data) * 3 // 4])
    usual = kineto_json._read_streaming(path, parallel=False)
    assert usual is not None and usual[1].cut_short["gzip_cut"]
    monkeypatch.setattr(kineto_json, "_PIECE_CAP", 97)
    small = kineto_json._read_streaming(path, parallel=False)
    assert small is not None and small[1] == usual[1]
    for group, frame in usual[0].items():
        assert small[0][group].equals(frame), group


@pytest.mark.parametrize("damage, message", [
    (lambda t: t.replace(b'"ts":', b'"ts": "soon", "x":', 1), "malformed trace event"),
    (lambda t: t + b"\n}garbage", "not valid JSON"),
    (lambda t: t.replace(b"},", b"}},", 1), "not valid JSON"),
])
def test_damage_anywhere_is_a_one_line_input_error(tmp_path, batch_sizes, damage, message):
    text = json.dumps(trace_of(random_events(5)), indent=1).encode()
    path = tmp_path / "bad.json"
    path.write_bytes(damage(text))
    with pytest.raises(InputError, match=message) as e:
        load_kineto(path)
    assert "\n" not in str(e.value)


def test_a_batch_without_a_cut_grows_until_one_is_found(tmp_path, monkeypatch):
    """An event larger than a batch (a long nested array of objects) is decoded whole."""
    monkeypatch.setattr(kineto_json, "_DECODE_BATCH", 256)
    monkeypatch.setattr(kineto_json, "_CUT_WINDOW", 64)
    events = random_events(6, n=60)
    events[30]["args"] = {"External id": 1, "huge": [{"k": i, "s": "},{"} for i in range(2000)]}
    events[30]["cat"] = "cpu_op"
    path = tmp_path / "big_event.json"
    path.write_text(json.dumps(trace_of(events)))
    assert decoded_groups(path) == expected_groups(events)


def test_op_shapes_in_the_tables_are_the_trace_s_own(tmp_path):
    """``op_shapes`` in the span table hold each op's ``Input Dims`` (compared as JSON)."""
    events = random_events(7)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace_of(events), separators=(",", ":")))
    spans = load_kineto(path)[0]["span"].filter(pl.col("op_id").is_not_null())
    dims = {e["args"]["External id"]: e["args"]["Input Dims"] for e in events
            if e.get("cat") in ("cpu_op", "user_annotation") and e["ph"] == "X"}
    got = {op: json.loads(s) for op, s in spans.select("op_id", "op_shapes").iter_rows()}
    assert got == dims


@pytest.fixture
def workers_at_once(monkeypatch):
    """Worker processes from the first batch on, with small batches (real traces need
    ~100 MB of text for them). Processes are for msgspec alone: without the compiled
    decoder (which uses threads)."""
    monkeypatch.setattr(kineto_json, "_kineto_scan", None)
    monkeypatch.setattr(kineto_json, "_PARALLEL_AFTER", 1)
    monkeypatch.setattr(kineto_json, "_PARALLEL_REST", 1)
    monkeypatch.setattr(kineto_json, "_WORKER_BATCH", 4096)
    monkeypatch.setattr(kineto_json, "_DECODE_BATCH", 4096)
    monkeypatch.setattr(kineto_json, "_READ_CHUNK", 1000)
    monkeypatch.setattr(kineto_json, "_GZ_READ", 300)
    monkeypatch.setattr(kineto_json.os, "cpu_count", lambda: 3)  # two workers
    monkeypatch.setattr(kineto_json, "_spawn_is_safe", lambda: True)  # pytest's main is guarded


def test_workers_start_only_under_zym_s_own_command(monkeypatch):
    """A spawned worker imports the main module again: a library caller's script must not
    run twice, so workers are only for `zym` itself."""
    import sys
    import types

    script = types.ModuleType("__main__")
    script.__file__ = "/home/me/profile_it.py"
    monkeypatch.setitem(sys.modules, "__main__", script)
    assert not kineto_json._spawn_is_safe()
    script.__file__ = "/venv/bin/zym"
    assert kineto_json._spawn_is_safe()


def test_batches_decoded_by_worker_processes_give_the_columns_json_load_gives(
        tmp_path, workers_at_once, monkeypatch):
    submitted = []
    real_submit = kineto_json._Workers.submit

    def counting_submit(self, buf, acc):
        rest = real_submit(self, buf, acc)
        submitted.append(rest is not None)
        return rest

    monkeypatch.setattr(kineto_json._Workers, "submit", counting_submit)
    events = random_events(8, n=3000, tricky=False)
    for name in ("kineto", "minified"):
        path = tmp_path / f"{name}.json.gz"
        path.write_bytes(gzip.compress(layouts(trace_of(events))[name]))
        assert decoded_groups(path) == expected_groups(events), name
    assert sum(submitted) > 3  # batches went to the workers


def test_a_worker_batch_cut_inside_a_string_is_decoded_again_in_one_process(
        tmp_path, workers_at_once, monkeypatch):
    """Every event ends with a string holding the text between two events: some batches
    sent to workers end inside it, and the file is then decoded in this process."""
    retried = []
    real = kineto_json._read_streaming

    def recording(path, parallel, **kwargs):
        retried.append(parallel)
        return real(path, parallel, **kwargs)

    monkeypatch.setattr(kineto_json, "_read_streaming", recording)
    events = random_events(9, n=2000, tricky=False)
    for e in events:
        e["name"] = "}, {" + e["name"]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace_of(events)))
    expected = expected_groups(events)
    tables = kineto_json.read_events(path)
    assert retried == [True, False]
    names = dict(tables[0]["names"].iter_rows())
    assert [names[i] for i in tables[0]["op"]["name_id"]] == [r["name"] for r in expected["op"]]


def test_zym_analyze_takes_a_bare_event_array(tmp_path):
    """The Trace Event Format allows a bare array of events: `zym analyze` reads it (no header,
    so no GPU model) with the same calls, GPU operations and kernels as the events in an
    object, and as many kernels as the events hold."""
    import subprocess
    import sys

    sample = Path(__file__).resolve().parents[2] / "sample_traces" / "gpt_decode_server.trace.json.gz"
    events = json.loads(gzip.decompress(sample.read_bytes()))["traceEvents"]
    bare, whole = tmp_path / "bare.json", tmp_path / "whole.json"
    bare.write_text(json.dumps(events))
    whole.write_text(json.dumps({"traceEvents": events}))
    reports = []
    for path in (bare, whole):
        res = subprocess.run([sys.executable, "-m", "zym.cli.main", "analyze", str(path),
                              "--format", "json", "--no-progress", "--no-rules"],
                             check=False, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        reports.append(json.loads(res.stdout))
    kernels = sum(1 for e in events if e.get("cat") == "kernel" and e.get("ph") == "X")
    keys = ("calls", "gpu_ops", "kernels", "copies", "paths")
    got = [{k: r["capture"][k] for k in keys} for r in reports]
    assert got[0] == got[1] and got[0]["kernels"] == kernels > 0
    assert reports[0]["gpu"] == reports[1]["gpu"]


def _whole_before(text: bytes, cut: int) -> list[dict]:
    """The events whose text ends before ``cut``: the stdlib's decoder, one object at a
    time from the events' ``[`` (not zym's cuts)."""
    s = text.decode("latin-1")
    at = s.index("[", s.index('"traceEvents"')) + 1
    out, decoder = [], json.JSONDecoder()
    while True:
        while s[at] in " \t\r\n,":
            at += 1
        if s[at] != "{":
            return out
        _, end = decoder.raw_decode(s, at)
        if end > cut:
            return out
        out.append(json.loads(s[at:end].encode("latin-1")))
        at = end


@pytest.mark.parametrize("seed", [5, 6])
@pytest.mark.parametrize("at", [0.4, 2 / 3, 0.9])
def test_a_cut_trace_reads_its_whole_events_to_the_frontier(tmp_path, batch_sizes, seed, at):
    """Cut anywhere, in any batch size, with names holding the text between two events: the
    groups are those of the whole events before the cut (found by the stdlib's decoder), up
    to the earliest of the groups' last starts."""
    text = json.dumps(trace_of(random_events(seed)), indent=1).encode()
    cut = int(len(text) * at)
    path = tmp_path / "cut.json"
    path.write_bytes(text[:cut])
    want = expected_groups(_whole_before(text, cut))
    until = min(max(r["ts_us"] for r in rows) for rows in want.values() if rows)
    want = {g: [r for r in rows if r["ts_us"] <= until] for g, rows in want.items()}
    assert decoded_groups(path) == want
