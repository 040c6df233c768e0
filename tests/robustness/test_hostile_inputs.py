"""Wrong answers, hangs and tracebacks on hostile inputs (issue 14): each case is one that the
code before this change got wrong (exit 0 with changed numbers, a hang, a traceback)."""
from __future__ import annotations

import gzip
import json
import random

import pytest
from hostile import (
    SAMPLE_JSON,
    SAMPLE_PARQUET,
    assert_clean_error,
    capture_rows,
    write_sealed,
    zym,
)


def test_bytes_changed_inside_a_capture_are_an_error_not_a_wrong_answer(tmp_path):
    data = bytearray(SAMPLE_PARQUET.read_bytes())
    rng = random.Random(14)
    for i in range(5):
        bad = bytearray(data)
        at = rng.randrange(len(bad) // 4, len(bad) * 3 // 4)
        bad[at:at + 64] = rng.randbytes(64)
        p = tmp_path / f"bad{i}.parquet"
        p.write_bytes(bad)
        for cmd in (["analyze", "-f", "json"], ["export", "-f", "folded", "-o", tmp_path / "x"],
                    ["report", "-o", tmp_path / "r.html"]):
            assert "corrupt capture" in assert_clean_error(zym(*cmd, p, "--no-progress"))


def test_bit_flipped_raw_stream_is_an_error_at_finalize(tmp_path):
    from zym.capture.sink import RawWriter

    raw = tmp_path / "c.parquet.raw"
    w = RawWriter(raw)
    for i in range(20_000):
        w.add("frames", pid=1, hash=i % 7, stack_key=i % 7, depth=0, kind="python",
              name="f", file="a.py", line=1) if i < 7 else None
        w.add_call(b"\0" * 0) if False else None
    w.close()
    import polars as pl
    import pyarrow as pa
    from pyarrow import ipc
    from zym.capture.rawcheck import ChecksummedFile
    from zym.capture.sink import raw_schema

    sink = ChecksummedFile(raw / "calls.arrow")  # 20,000 calls in three batches
    writer = ipc.new_stream(sink, raw_schema("calls"))
    for part in range(3):
        n = 20_000 // 3
        cols = {"pid": [1] * n, "tid": [1] * n, "ts_ns": list(range(n)), "dur_ns": [5] * n,
                "probe": [0] * n, "size_arg": [0] * n, "stream": [0] * n, "copy_arg": [0] * n,
                "stack_hash": [part] * n, "flags": [0] * n, "native_key": [0] * n}
        writer.write_batch(pa.record_batch(pl.DataFrame(cols).cast(
            {c: t for c, t in zip(raw_schema("calls").names,
                                  [pl.Int64, pl.Int64, pl.Int64, pl.Int64, pl.Int32, pl.UInt64,
                                   pl.UInt64, pl.UInt64, pl.UInt64, pl.Int32, pl.UInt64])}).to_arrow()
            .to_batches()[0].columns, schema=raw_schema("calls")))
        sink.checkpoint()
    writer.close()
    sink.close()
    ok = zym("capture", "--finalize", raw, "-o", tmp_path / "ok.parquet")
    assert ok.returncode == 0 and b"20001 calls" not in ok.stderr, ok.stderr
    data = bytearray((raw / "calls.arrow").read_bytes())
    for at in (600, len(data) // 2, len(data) - 900):
        flipped = bytearray(data)
        flipped[at] ^= 0x10
        (raw / "calls.arrow").write_bytes(flipped)
        err = assert_clean_error(zym("capture", "--finalize", raw, "-o", tmp_path / "x.parquet"))
        assert "do not match their checksum" in err
    (raw / "calls.arrow").write_bytes(data)
    (raw / "meta.json").write_text("[1, 2]")
    assert "not an object" in assert_clean_error(
        zym("capture", "--finalize", raw, "-o", tmp_path / "y.parquet"))


STACKS = {
    "cycle": [(0, 1, 0, 0), (1, 0, 0, 1)],
    "dangling parent": [(0, None, 0, 0), (1, 9, 0, 1)],
    "duplicate stack id": [(0, None, 0, 0), (0, None, 0, 0)],
    "depth 2^31-1": [(0, None, 0, 0), (1, 0, 0, 2**31 - 1)],
}


@pytest.mark.parametrize("case", STACKS)
def test_broken_stack_tables_are_one_line_for_every_reader(tmp_path, case):
    p = write_sealed(tmp_path / "s.parquet", capture_rows(STACKS[case]))
    for cmd in (["analyze"], ["export", "-o", tmp_path / "t.pftrace"],
                ["report", "-o", tmp_path / "r.html"]):
        assert "stack table" in assert_clean_error(zym(*cmd, p, "--no-progress", timeout=60))


@pytest.mark.parametrize("column,value", [("ts_ns", None), ("dur_ns", -5),
                                          ("ts_ns", 2**63 - 2), ("kind", "warp-drive")])
def test_values_out_of_range_are_one_line(tmp_path, column, value):
    rows = capture_rows([(0, None, 0, 0)])
    first_call = rows["record"].index("call")
    rows[column][first_call] = value
    p = write_sealed(tmp_path / "v.parquet", rows)
    assert_clean_error(zym("analyze", p, "--no-progress", timeout=60))


@pytest.mark.parametrize("meta", ['[1]', '"x"', '{"producer": 5}', '[' * 100_000])
def test_meta_of_the_wrong_type_is_one_line(tmp_path, meta):
    import pyarrow.parquet as pq
    from zym.schemas.integrity import seal

    p = write_sealed(tmp_path / "m.parquet", capture_rows([(0, None, 0, 0)]))
    t = pq.read_table(p)
    kv = dict(t.schema.metadata)
    kv[b"zym.meta"] = meta.encode()
    kv[b"zym.content_hash"] = b"sha256:" + b"0" * 64
    pq.write_table(t.replace_schema_metadata(kv), p)
    seal(p)
    assert "zym.meta" in assert_clean_error(zym("analyze", p, "--no-progress"))


def kineto(events, **top) -> bytes:
    return json.dumps({"traceEvents": events, **top}).encode()


def ev(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": args}


BASE = [ev("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=1),
        ev("kernel", "k", 20, 5, correlation=1, device=0, stream=7)]
KINETO = {
    "ts past int64 ns": [ev("cuda_runtime", "cudaLaunchKernel", 1e17, 5, correlation=1)],
    "negative duration": [ev("cuda_runtime", "cudaLaunchKernel", 10, -5, correlation=1)],
    "device id wider than int32": [ev("kernel", "k", 20, 5, correlation=1, device=2**40)],
    "correlation wider than int64": [ev("kernel", "k", 20, 5, correlation=2**70)],
    "non-ASCII digits as pid": [dict(ev("cuda_runtime", "c", 1, 1), pid="²")],
    "nested 100,000 deep": [ev("cpu_op", "aten::mm", 1, 9, **{"Input Dims": "X"})],
}


@pytest.mark.parametrize("case", KINETO)
def test_kineto_fields_are_range_checked(tmp_path, case):
    text = kineto(BASE + KINETO[case])
    if case == "nested 100,000 deep":
        text = text.replace(b'"X"', b"[" * 100_000 + b"]" * 100_000)
    p = tmp_path / "t.json"
    p.write_bytes(text)
    assert_clean_error(zym("analyze", p, "--no-progress"))


def test_multi_member_gzip_is_read_whole(tmp_path):
    text = gzip.decompress(SAMPLE_JSON.read_bytes())
    p = tmp_path / "multi.json.gz"
    p.write_bytes(gzip.compress(text[:1000]) + gzip.compress(text[1000:]))
    one = zym("analyze", SAMPLE_JSON, "-f", "json", "--no-progress")
    two = zym("analyze", p, "-f", "json", "--no-progress")
    assert two.returncode == 0, two.stderr[-500:]
    strip = lambda out: {k: v for k, v in json.loads(out).items() if k != "capture"}
    assert strip(two.stdout) == strip(one.stdout)


def test_gzip_bomb_is_refused_in_bounded_memory(tmp_path):
    p = tmp_path / "bomb.json.gz"
    with gzip.open(p, "wb", compresslevel=9) as f:
        chunk = b"\0" * (1 << 20)
        for _ in range(1024):  # 1 GiB of zeros
            f.write(chunk)
    err = assert_clean_error(zym("analyze", p, "--no-progress", timeout=60))
    assert "not JSON" in err or "neither a zym capture" in err
    spaces = tmp_path / "spaces.json.gz"
    with gzip.open(spaces, "wb", compresslevel=9) as f:
        f.write(b"{")
        for _ in range(700):  # 700 MiB of whitespace: JSON, but past MAX_WHOLE_JSON
            f.write(b" " * (1 << 20))
    assert "MiB of JSON" in assert_clean_error(zym("analyze", spaces, "--no-progress", timeout=120))


def test_deep_python_stack_is_an_error_in_bounded_time_and_memory(tmp_path):
    depth = 50_000
    events = [ev("python_function", f"a.py({i}): f{i}", i, 2 * depth - 2 * i,
                 **{"Python id": i + 1, "Python parent id": i}) for i in range(depth)]
    events.append(ev("cuda_runtime", "cudaLaunchKernel", depth, 1, correlation=1))
    p = tmp_path / "deep.json"
    p.write_bytes(kineto(events))
    for cmd in (["analyze"], ["report", "-o", tmp_path / "r.html"]):
        assert "depth out of range" in assert_clean_error(zym(*cmd, p, "--no-progress", timeout=90))


def test_yaml_alias_bomb_is_refused_quickly(tmp_path):
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        prev, cur = chr(96 + i), chr(97 + i)
        lines.append(f"{cur}: &{cur} [{', '.join([f'*{prev}'] * 9)}]")
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(lines) + "\npack: mine\n")
    for cmd in (["rules", "lint", p], ["rules", "list", "-r", p],
                ["analyze", SAMPLE_PARQUET, "-r", p, "--no-progress"]):
        assert "alias" in assert_clean_error(zym(*cmd, timeout=30))
