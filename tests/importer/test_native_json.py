"""The compiled Kineto JSON decoder (capture/_kineto_scan.c): it gives, field by field, what
``json.loads`` of the same text gives (an independent decoder); every batch it refuses is
decoded by msgspec, to the same tables or the same one-line error; and it gives the same
tables and report as msgspec alone on the bundled trace and its re-serialisations."""
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

GROUP_OF = {"python_function": "python", "cpu_op": "op", "user_annotation": "op",
            "cuda_runtime": "call", "cuda_driver": "call", "kernel": "gpu", "gpu_memcpy": "gpu",
            "gpu_memset": "gpu", "cuda_sync": "gpu"}
NAMES = ['say "hi"', "back\\slash", "caf\u00e9", "snow \u2603", "emoji \U0001F600", "a},{b",
         'x}, {"ph": "X"}', "]", "[", "},\n  {", "tab\there", "nul\u0000byte", "/slash",
         "aten::mm", "app.py(12): forward", ""]
IDS = [7, -3, 0, "12", "-5", "007", "Spans", "", "-", "1.5", "+4", "١٢", None]


@pytest.fixture
def compiled():
    if kineto_json._kineto_scan is None:
        pytest.skip("native JSON decoder not built (pip install -e . needs gcc and the "
                    "Python headers)")
    return kineto_json._kineto_scan


@pytest.fixture(params=["compiled", "msgspec"])
def decoder(request, monkeypatch):
    """Each test with the compiled decoder, and with msgspec alone."""
    if request.param == "compiled":
        request.getfixturevalue("compiled")
    else:
        monkeypatch.setattr(kineto_json, "_kineto_scan", None)
    return request.param


def test_the_compiled_decoder_is_built(compiled):
    assert callable(compiled.scan)


def odd_events(seed: int, n: int = 600) -> list[dict]:
    """Events of every category with escaped and bracketed names, ids as numbers and as
    strings, fields missing or null, floats written as integers and with exponents, keys in
    random order, and events zym skips."""
    rng = random.Random(seed)
    events = []
    for i in range(n):
        cat = rng.choice([*GROUP_OF, "ac2g", "Trace", "gpu_user_annotation", None])
        ev: dict = {"ph": rng.choice("XXXXXi") if cat else "M", "cat": cat,
                    "name": rng.choice([*NAMES, None]), "pid": rng.choice(IDS),
                    "tid": rng.choice(IDS),
                    "ts": rng.choice([1000.5 + i, 5083073386369.537, 7, -0.0, 1.5e3, 2.5E-3,
                                      12345678901234567890, None]),
                    "dur": rng.choice([0, 0.25, 353.114, None, 1e300])}
        args: dict = {"Python id": rng.choice([i, None]),
                      "Python parent id": rng.choice([i - 1, None]),
                      "External id": rng.choice([i, -i, None, 2**62]),
                      "correlation": i, "cbid": rng.choice([211, None]),
                      "device": 0, "stream": rng.choice([7, None]), "bytes": 4096,
                      "graph id": rng.choice([None, 3]),
                      "Sequence number": rng.choice([i, 0, None, 2**40]),
                      "grid": rng.choice([[i % 9 + 1, 1, 1], [2], [], [None, 2, 3]]),
                      "block": [128, 1, 1],
                      "Input Dims": rng.choice([[[4, 8], [8]], [[[1], [2]], [], [3]], [], None]),
                      "Input type": rng.choice([["float", "c10::Half"], ["a\"b"], []]),
                      "Concrete Inputs": ["", "[1, 2]", "}{"], "nested": [{"a": {"b": [{}]}}],
                      "blocks per SM": 0.5, "flag": rng.choice([True, False, None])}
        for key in rng.sample(list(args), k=rng.randint(0, 5)):  # some missing
            del args[key]
        ev["args"] = dict(rng.sample(list(args.items()), k=len(args)))  # any key order
        for key in rng.sample(["name", "pid", "tid", "ts", "dur", "args"], k=rng.randint(0, 2)):
            del ev[key]
        events.append(dict(rng.sample(list(ev.items()), k=len(ev))))
    return events


def as_id(v: object) -> int | None:
    """pid/tid as zym reads them: a number, or a string of ASCII digits (a '-' first)."""
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        digits = v.removeprefix("-")
        if digits and all("0" <= c <= "9" for c in digits):
            return int(v)
    return None


def expected_rows(events: list[dict]) -> dict[str, list[dict]]:
    """What zym reads of each complete event of its categories, from json.loads's objects."""
    out: dict[str, list[dict]] = {"python": [], "op": [], "call": [], "gpu": []}
    for e in events:
        group = GROUP_OF.get(e.get("cat"))
        if group is None or e.get("ph") != "X":
            continue
        a = e.get("args", {})
        ts, dur = e.get("ts"), e.get("dur")
        row = {"cat": e["cat"], "name": e.get("name"), "pid": as_id(e.get("pid")),
               "tid": as_id(e.get("tid")), "ts_us": None if ts is None else float(ts),
               "dur_us": None if dur is None else float(dur)}
        if group == "python":
            row |= {"python_id": a.get("Python id"), "python_parent_id": a.get("Python parent id")}
        elif group == "op":
            row |= {"external_id": a.get("External id"), "sequence": a.get("Sequence number"),
                    "shape": a.get("Input Dims", "absent"),
                    "dtypes": a.get("Input type", "absent")}
        elif group == "call":
            row |= {"external_id": a.get("External id"), "correlation_id": a.get("correlation"),
                    "cbid": a.get("cbid")}
        else:
            grid = (a.get("grid", []) + [None] * 3)[:3]
            block = (a.get("block", []) + [None] * 3)[:3]
            row |= {"external_id": a.get("External id"), "correlation_id": a.get("correlation"),
                    "device_id": a.get("device"), "stream_id": a.get("stream"),
                    "size_bytes": a.get("bytes"), "graph_id": a.get("graph id"),
                    **{f"grid_{x}": v for x, v in zip("xyz", grid)},
                    **{f"block_{x}": v for x, v in zip("xyz", block)}}
        out[group].append(row)
    return out


def decoded_rows(groups: dict[str, pl.DataFrame]) -> dict[str, list[dict]]:
    """zym's group frames as rows, names and shapes resolved (an absent shape: "absent")."""
    names = dict(groups["names"].iter_rows())
    shapes = dict(groups["shapes"].iter_rows())

    def shape(i):
        return "absent" if i is None else json.loads(shapes[i])

    out = {}
    for group in ("python", "op", "call", "gpu"):
        rows = []
        for r in groups[group].iter_rows(named=True):
            r["name"] = r["name"] if group == "gpu" else names[r.pop("name_id")]
            if group == "op":
                r["shape"], r["dtypes"] = shape(r.pop("shape_id")), shape(r.pop("dtypes_id"))
            rows.append(r)
        out[group] = rows
    return out


def layouts(trace: dict) -> dict[str, bytes]:
    events = trace["traceEvents"]
    return {
        "kineto": ("{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in
                                      trace.items() if k != "traceEvents")
                   + ',\n  "traceEvents": ['
                   + ",".join("\n  {\n    " + json.dumps(e)[1:-1] + "\n  }" for e in events)
                   + "\n  ]\n}").encode(),
        "minified": json.dumps(trace, separators=(",", ":")).encode(),
        "ascii_escapes": json.dumps(trace, ensure_ascii=True).encode(),
        "utf8": json.dumps(trace, ensure_ascii=False).encode(),
        "indent1_sorted": json.dumps(trace, indent=1, sort_keys=True).encode(),
        "indent4_crlf": json.dumps(trace, indent=4).replace("\n", "\r\n").encode(),
        "bare_array": json.dumps(events, indent=2).encode(),
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_odd_events_decode_field_by_field_to_what_json_loads_gives(tmp_path, seed, decoder):
    events = odd_events(seed)
    trace = {"schemaVersion": 1, "traceEvents": events, "after": [[1], {"x": "]"}]}
    expected = expected_rows(json.loads(json.dumps(events)))
    assert all(expected.values())
    for name, text in layouts(trace).items():
        path = tmp_path / f"{name}.json.gz"
        path.write_bytes(gzip.compress(text))
        got = decoded_rows(kineto_json.read_events(path)[0])
        for group, rows in expected.items():
            assert got[group] == rows, (name, group)


def scan(text: bytes):
    return kineto_json._kineto_scan.scan(text, 0, len(text), kineto_json._SCAN_CATS)


# Text that json.loads refuses inside "[...]": the compiled decoder must refuse it too.
NOT_JSON = [b'{"ph": "X", "name": "cut here', b'{"a": [1 2]}', b'{"a": 1},', b'{"a": tru}',
            b'{"a": 01}', b'{"a": 1.}', b'{"a": -}', b'{"a": .5}', b'{"a": 1e}',
            b'{"a": "ctrl\x01char"}', b'{"a": "bad \\x escape"}', b'{"a": "\\u12g4"}',
            b'{"a": "\xff"}', b'{"a": "\xc3"}', b'{"a" 1}', b'{"a": 1 "b": 2}', b'{"a": [}',
            b'{"a": {"b": 1]}', b'{"cat": "kernel"', b'{} {}', b'{"a": nul}', b'{,}',
            b'{"a": [1,]}', b'{"a": 1}}', b'{"a": "x"}"',
            b'{"ph": "X", "cat": "kernel", "name": "k\\', b'{"a": 1e5.5}', b'{"a": +1}']


@pytest.mark.parametrize("text", NOT_JSON)
def test_text_that_is_not_json_is_refused(compiled, text):
    with pytest.raises(ValueError):
        json.loads(b"[" + text + b"]")
    assert scan(text) is None


# JSON, but not of the types zym reads (or not plain): refused by the compiled decoder, so
# msgspec decodes the batch or names the problem.
REFUSED = [
    b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": "12"}',
    b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": true}',
    b'{"ph": "X", "cat": "cpu_op", "name": "a", "args": {"External id": 1.5}}',
    b'{"ph": "X", "cat": "cpu_op", "name": "a", "args": {"External id": "7"}}',
    b'{"ph": "X", "cat": "cpu_op", "name": "a", "args": {"device": "cuda:0"}}',
    b'{"ph": "X", "cat": "cpu_op", "name": "a", "args": null}',
    b'{"ph": "X", "cat": "kernel", "name": "k", "args": {"grid": [1, 2, 3, 4]}}',
    b'{"ph": "X", "cat": "kernel", "name": "k", "args": {"grid": null}}',
    b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 1.5}',
    b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 99999999999999999999}',
    b'{"ph": null, "cat": "kernel", "name": "k"}',
    b'{"ph": "X", "cat": 3, "name": "k"}',
    b'{"ph": "X", "cat": "kernel", "name": 3}',
    b'{"\\u0070h": "X", "cat": "kernel", "name": "k"}',
    b'{"ph": "X", "cat": "kernel", "cat": "cpu_op", "name": "k"}',
    b'{"ph": "X", "cat": "kernel", "name": "\\ud800 lone"}',
    b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1e999}',
    b'7',
    b'[{"ph": "X", "cat": "kernel"}]',
]


@pytest.mark.parametrize("text", REFUSED)
def test_json_of_other_types_is_refused_and_left_to_msgspec(compiled, text):
    json.loads(b"[" + text + b"]")  # JSON: only its types are not plain
    assert scan(text) is None


def test_a_refused_batch_gives_msgspec_s_tables_or_error(tmp_path, compiled, monkeypatch):
    """A field zym does not read for that category, of a type it does not expect: msgspec's
    per-category decoder ignores it (the batch holds only categories it knows). In small
    batches, among events the compiled decoder takes (checked: read as one batch, the whole
    file was refused and decoded by msgspec, as it is for msgspec alone): that batch alone
    goes to msgspec, the others are the compiled decoder's."""
    for name in ("_DECODE_BATCH", "_THREAD_BATCH"):
        monkeypatch.setattr(kineto_json, name, 4096)
    monkeypatch.setattr(kineto_json, "_READ_CHUNK", 1000)
    events = [e for e in odd_events(4, n=400) if e.get("cat") in GROUP_OF and e["ph"] == "X"
              and scan(json.dumps(e).encode()) is not None  # (no batch refused but one)
              and "}" not in str(e.get("name"))]  # (no cut inside a name: no second reading)
    ok = {"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 5.0, "dur": 1.0,
          "args": {"External id": 3, "device": "cuda:0", "Input Dims": [[1]]}}  # msgspec: fine
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [*events[:100], ok, *events[100:]]}))
    assert scan(json.dumps(ok).encode()) is None
    real_scan, real_decode, scanned, refused = (kineto_json._scan_frames,
                                                kineto_json._decode_events, [], [])

    def scanning(*a):
        frames = real_scan(*a)
        scanned.append(frames is not None)
        return frames

    def decoding(text):
        refused.append(b'"cuda:0"' in bytes(text))  # msgspec decodes the batch holding ``ok``
        return real_decode(text)

    monkeypatch.setattr(kineto_json, "_scan_frames", scanning)
    monkeypatch.setattr(kineto_json, "_decode_events", decoding)
    got = kineto_json.read_events(path)[0]
    assert refused == [True] and scanned.count(True) > 5, (refused, scanned)
    monkeypatch.setattr(kineto_json, "_kineto_scan", None)
    want = kineto_json.read_events(path)[0]
    assert set(got) == set(want)
    for g in want:
        assert got[g].equals(want[g]), g
    monkeypatch.undo()
    bad = dict(ok, ts="soon")
    path.write_text(json.dumps({"traceEvents": [*events[:100], bad, *events[100:]]}))
    with pytest.raises(InputError, match="malformed trace event") as e:
        kineto_json.read_events(path)
    assert "\n" not in str(e.value)


def test_thread_batches_cut_inside_a_string_are_decoded_again_in_one_thread(
        tmp_path, compiled, monkeypatch):
    """Every name holds the text between two events: batches given to threads end inside
    a string, and the file is then decoded again in this thread alone."""
    monkeypatch.setattr(kineto_json, "_THREAD_BATCH", 2048)
    monkeypatch.setattr(kineto_json, "_DECODE_BATCH", 2048)
    monkeypatch.setattr(kineto_json, "_READ_CHUNK", 1000)
    retried = []
    real = kineto_json._read_streaming

    def recording(path, parallel, **kwargs):
        retried.append(parallel)
        return real(path, parallel, **kwargs)

    monkeypatch.setattr(kineto_json, "_read_streaming", recording)
    events = [e for e in odd_events(5, n=2000) if e.get("ph") == "X"]
    for e in events:
        e["name"] = "}, {" + str(e.get("name"))
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    got = decoded_rows(kineto_json.read_events(path)[0])
    assert retried == [True, False]
    assert got == expected_rows(events)


def test_threads_and_one_thread_give_the_same_frames(tmp_path, compiled, monkeypatch):
    """Odd events in small batches (gunzipped a few KB at a time): threads decode many of
    them (checked: with the default sizes the whole file was one batch, which this thread
    decoded), and the frames are those of one thread."""
    for name in ("_THREAD_BATCH", "_DECODE_BATCH"):
        monkeypatch.setattr(kineto_json, name, 4096)
    monkeypatch.setattr(kineto_json, "_GZ_READ", 512)
    import threading

    real, where = kineto_json._decode_slice, []

    def recording(buf, start, end):
        where.append(threading.current_thread().name.startswith("zym-json"))
        return real(buf, start, end)

    monkeypatch.setattr(kineto_json, "_decode_slice", recording)
    events = odd_events(6, n=3000)
    for e in events:  # no name that reads as the text between two events: a thread's batch
        if "}" in str(e.get("name")):  # cut inside one is the case of the test above
            e["name"] = "aten::mm"
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}, indent=1).encode()))
    threads = kineto_json._read_streaming(path, parallel=True)[0]
    assert sum(where) > 10, where  # batches a thread decoded
    single = kineto_json._read_streaming(path, parallel=False)[0]
    for g in single:
        assert threads[g].equals(single[g]), g
    assert decoded_rows(threads) == expected_rows(events)


@pytest.fixture(scope="module")
def sample_text(sample_trace) -> dict:
    with gzip.open(sample_trace) as f:
        return json.load(f)


def same_tables(a: dict[str, pl.DataFrame], b: dict[str, pl.DataFrame]) -> bool:
    """Equal tables; shapes and dtypes are the trace's own JSON text (spaced as the file
    spaces them), so they are compared as JSON values."""
    for table, x in a.items():
        y = b[table]
        shapes = [c for c in ("op_shapes", "op_dtypes") if c in x.columns]
        if not x.drop(shapes).equals(y.drop(shapes)):
            return False
        for c in shapes:
            if [None if v is None else json.loads(v) for v in x[c]] != \
                    [None if v is None else json.loads(v) for v in y[c]]:
                return False
    return True


def test_the_sample_gives_msgspec_s_tables_and_report(sample_trace, compiled, monkeypatch):
    from zym.analysis import analyze

    tables, meta = load_kineto(sample_trace)
    report = analyze(sample_trace).to_dict()
    monkeypatch.setattr(kineto_json, "_kineto_scan", None)
    pure_tables, pure_meta = load_kineto(sample_trace)
    assert {**vars(meta), "created_at": None} == {**vars(pure_meta), "created_at": None}
    for table, frame in pure_tables.items():
        assert tables[table].equals(frame), table  # the same text: shapes too
    assert analyze(sample_trace).to_dict() == report


@pytest.mark.parametrize("layout", ["minified", "one_line_spaced", "indent1_sorted", "indent4",
                                    "bare_array"])
def test_re_serialisations_of_the_sample_give_its_tables(tmp_path, sample_trace, sample_text,
                                                         compiled, layout):
    text = {"minified": lambda t: json.dumps(t, separators=(",", ":")),
            "one_line_spaced": json.dumps,
            "indent1_sorted": lambda t: json.dumps(t, indent=1, sort_keys=True),
            "indent4": lambda t: json.dumps(t, indent=4),
            "bare_array": lambda t: json.dumps(t["traceEvents"])}[layout](sample_text)
    path = tmp_path / f"{layout}.json"
    path.write_text(text)
    original, _ = load_kineto(sample_trace)
    again, _ = load_kineto(path)
    assert same_tables(original, again)


def test_the_compiled_decoder_decodes_the_sample_s_batches_itself(sample_trace, compiled,
                                                                   monkeypatch):
    """The bundled trace never needs msgspec: every batch the compiled decoder reads."""
    calls = []
    real = kineto_json._decode_events

    def counting(text):
        calls.append(len(text))
        return real(text)

    monkeypatch.setattr(kineto_json, "_decode_events", counting)
    kineto_json._read_streaming(Path(sample_trace), parallel=False)
    assert calls == []


def test_numbers_are_read_as_python_reads_them(compiled):
    """ts and dur (floats, in one pass for plain decimals, by strtod otherwise) and ids
    (integers) against Python's float() and int() of json.loads's numbers; "-0" is the
    integer 0 (msgspec's +0.0), "-0.0" keeps its sign."""
    import math
    import struct

    rng = random.Random(11)
    texts = ["0", "-0", "-0.0", "5", "0.5", "5083073386369.537", "9007199254740993",
             "9007199254740992.5", "12345678901234567890", "1e5", "1.5E-3", "2.5e+300",
             "0.30000000000000004", "4.9e-324", "2.2250738585072014e-308", "123.456e2",
             "1234567890123456789.5", "0.000000000000000000000001"]
    texts += [repr(rng.uniform(-1e6, 1e6)) for _ in range(500)]
    texts += [repr(rng.random() * 10.0 ** rng.randint(-300, 300)) for _ in range(500)]
    texts += [f"{rng.randint(0, 10**9)}.{rng.randint(0, 10**9):09d}" for _ in range(500)]
    for text in texts:
        whole = text.split(".")[0].split("e")[0].split("E")[0]
        if not -2**63 <= int(whole) < 2**63:
            whole = "1"
        event = (f'{{"ph": "X", "cat": "kernel", "ts": {text}, "dur": 1, '
                 f'"args": {{"correlation": {whole}}}}}').encode()
        _, _, ints, floats, _ = scan(event)
        got = struct.unpack("d", floats[0][0])[0]
        want = float(json.loads(text))
        assert got == want and math.copysign(1, got) == math.copysign(1, want), text
        assert struct.unpack("q", ints[5][0])[0] == int(json.loads(whole)), text


def test_gpu_kernel_names_are_the_raw_json_s(sample_trace, decoder):
    """The GPU table's kernel names: each GPU event's own name as the raw JSON has it (read
    here with the json module), with either decoder. (Decoding them as categorical codes was
    tried and undone: the table's text, cast back from codes, took every row's own copy, ~0.3
    GB more on a trace of long CUTLASS names; gathered from each batch's distinct names, the
    rows share those strings.)"""
    with gzip.open(sample_trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    gpu_cats = {c for c, g in GROUP_OF.items() if g == "gpu"}
    want = sorted(e["name"] for e in events if e.get("ph") == "X" and e.get("cat") in gpu_cats)
    table = load_kineto(sample_trace)[0]["gpu"]
    assert table.schema["name"] == pl.String
    assert sorted(table["name"]) == want


def test_threads_read_each_batch_in_the_readers_buffer(sample_trace, compiled, monkeypatch):
    """On the bundled trace (45 MB of text, batches of 4 MB): the threads read each batch in
    the reading thread's own buffer, from its start (no copy of the text), which the reader
    does not change afterwards; the frames are those of one thread."""
    real, read = kineto_json._decode_slice, []

    def recording(buf, start, end):
        before = hash(bytes(buf))
        got = real(buf, start, end)
        read.append((type(buf), start, hash(bytes(buf)) == before))
        return got

    monkeypatch.setattr(kineto_json, "_decode_slice", recording)
    threads = kineto_json._read_streaming(sample_trace, parallel=True)[0]
    assert len(read) > 3 and set(read) == {(bytearray, 0, True)}
    single = kineto_json._read_streaming(sample_trace, parallel=False)[0]
    for g in single:
        assert threads[g].equals(single[g]), g
