"""Schema v1 capture file: round trip, layout, queryability, and refusal of foreign files."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal
from zym.schemas import (
    TABLES,
    CaptureMeta,
    InputError,
    SchemaError,
    arrow_schema,
    open_capture,
    polars_schema,
    write_capture,
)
from zym.schemas.integrity import HASH_KEY, HASH_PLACEHOLDER, seal
from zym.schemas.meta import META_KEY, VERSION_KEY
from zym.schemas.version import SCHEMA_VERSION


def small_tables() -> dict[str, pl.DataFrame]:
    return {
        "frame": pl.DataFrame({"frame_id": [0, 1, 2], "kind": ["python", "torch_op", "cuda_api"],
                               "name": ["main", "aten::mm", "cuLaunchKernel"],
                               "file": ["app.py", None, None], "line": [12, None, None]}),
        "stack": pl.DataFrame({"stack_id": [0, 1, 2], "parent_id": [None, 0, 1],
                               "frame_id": [0, 1, 2], "depth": [0, 1, 2]}),
        "call": pl.DataFrame({"pid": [1, 1], "tid": [1, 2], "ts_ns": [100, 200], "dur_ns": [5, 7],
                              "name": ["cuLaunchKernel", "cuStreamSynchronize"],
                              "kind": ["launch", "sync"], "correlation_id": [9, None],
                              "stack_id": [2, 2]}),
        "gpu": pl.DataFrame({"pid": [1], "device_id": [0], "stream_id": [7], "ts_ns": [150],
                             "dur_ns": [40], "name": ["gemm"], "kind": ["kernel"],
                             "correlation_id": [9], "grid_x": [4], "block_x": [128]}),
    }


@pytest.fixture
def capture_file(tmp_path):
    return write_capture(tmp_path / "t.parquet", small_tables(),
                         CaptureMeta(producer="test", dropped={"ebpf_ringbuf": 3}))


def test_round_trip_keeps_every_value(capture_file):
    cap = open_capture(capture_file)
    for table, df in small_tables().items():
        loaded = cap.load(table)
        assert loaded.columns == [c for c in TABLES[table] if c != "record"]
        assert_frame_equal(loaded.select(df.columns), df, check_dtypes=False)
    assert cap.meta.producer == "test"
    assert cap.meta.dropped == {"ebpf_ringbuf": 3}
    assert cap.load("span").height == 0


def test_row_groups_never_mix_record_kinds(capture_file):
    md = pq.ParquetFile(capture_file).metadata
    record_col = md.schema.to_arrow_schema().get_field_index("record")
    kinds = []
    for i in range(md.num_row_groups):
        stats = md.row_group(i).column(record_col).statistics
        assert stats.min == stats.max, f"row group {i} mixes {stats.min} and {stats.max}"
        kinds.append(stats.min)
    assert kinds == ["frame", "stack", "call", "gpu"]


def test_queryable_with_duckdb_pyarrow_and_polars(capture_file):
    f = str(capture_file)
    assert duckdb.sql(f"SELECT sum(dur_ns) FROM '{f}' WHERE record = 'gpu'").fetchall() == [(40,)]
    joined = duckdb.sql(
        f"SELECT g.name, c.name FROM '{f}' g JOIN '{f}' c USING (correlation_id) "
        "WHERE g.record = 'gpu' AND c.record = 'call'").fetchall()
    assert joined == [("gemm", "cuLaunchKernel")]
    t = pq.read_table(f, filters=[("record", "=", "call")], columns=["name", "dur_ns"])
    assert t.column("name").to_pylist() == ["cuLaunchKernel", "cuStreamSynchronize"]
    kv = pq.read_metadata(f).metadata
    assert kv[VERSION_KEY.encode()] == str(SCHEMA_VERSION).encode()
    assert json.loads(kv[META_KEY.encode()])["producer"] == "test"
    assert pl.scan_parquet(f).filter(pl.col("record") == "frame").select(pl.len()).collect().item() == 3


def test_schemas_agree_between_pyarrow_and_polars():
    for table in TABLES:
        arrow = pl.from_arrow(arrow_schema(table).empty_table()).schema
        assert dict(arrow) == polars_schema(table)
    assert all(f.metadata[b"doc"] for f in arrow_schema())


def test_conform_rejects_nulls_in_required_columns(tmp_path):
    bad = {"gpu": pl.DataFrame({"ts_ns": [1], "dur_ns": [None], "name": ["k"], "kind": ["kernel"]})}
    with pytest.raises(SchemaError, match="dur_ns"):
        write_capture(tmp_path / "x.parquet", bad, CaptureMeta(producer="t"))
    assert not list(tmp_path.iterdir()), "a failed write leaves nothing behind"


def _write_raw(path, table: pa.Table) -> None:
    pq.write_table(table, path)


def test_foreign_parquet_is_refused(tmp_path):
    path = tmp_path / "other.parquet"
    _write_raw(path, pa.table({"a": [1, 2]}))
    with pytest.raises(SchemaError, match="not a zym capture"):
        open_capture(path)


def test_other_schema_version_is_refused(capture_file, tmp_path):
    t = pq.read_table(capture_file)
    later = SCHEMA_VERSION + 1
    path = tmp_path / f"v{later}.parquet"
    _write_raw(path, t.replace_schema_metadata({VERSION_KEY: str(later), META_KEY: "{}"}))
    with pytest.raises(SchemaError, match=f"schema version {later}; this zym reads version"):
        open_capture(path)


def test_version_3_files_read_with_op_seq_null(tmp_path):
    # a v3 file is a v4 file without the spans' autograd sequence numbers (op_seq)
    tables = small_tables() | {"span": pl.DataFrame(
        {"pid": [1, 1], "tid": [1, 1], "ts_ns": [0, 10], "dur_ns": [5, 5], "stack_id": [1, 1],
         "op_id": [3, 4], "op_seq": [17, None]})}
    capture_file = write_capture(tmp_path / "t.parquet", tables, CaptureMeta(producer="test"))
    assert open_capture(capture_file).load("span")["op_seq"].to_list() == [17, None]
    t = pq.read_table(capture_file)
    v3 = t.drop_columns(["op_seq"]).replace_schema_metadata(
        {**t.schema.metadata, VERSION_KEY.encode(): b"3", HASH_KEY.encode(): HASH_PLACEHOLDER.encode()})
    _write_raw(tmp_path / "v3.parquet", v3)
    seal(tmp_path / "v3.parquet")
    spans = open_capture(tmp_path / "v3.parquet").load("span")
    assert spans.height == pq.read_table(capture_file, filters=[("record", "=", "span")]).num_rows
    assert spans["op_seq"].null_count() == spans.height
    with pytest.raises(SchemaError):  # a v4 file must have it
        v4 = t.drop_columns(["op_seq"]).replace_schema_metadata(
            {**t.schema.metadata, HASH_KEY.encode(): HASH_PLACEHOLDER.encode()})
        _write_raw(tmp_path / "v4.parquet", v4)
        seal(tmp_path / "v4.parquet")
        open_capture(tmp_path / "v4.parquet")


def test_version_2_files_read_without_ranges(capture_file, tmp_path):
    # a v2 file is a v3 file without the range columns (domain, clipped) and range rows
    t = pq.read_table(capture_file)
    v2 = t.drop_columns(["domain", "clipped"]).replace_schema_metadata(
        {**t.schema.metadata, VERSION_KEY.encode(): b"2", HASH_KEY.encode(): HASH_PLACEHOLDER.encode()})
    _write_raw(tmp_path / "v2.parquet", v2)
    seal(tmp_path / "v2.parquet")
    cap = open_capture(tmp_path / "v2.parquet")
    assert cap.load("range").height == 0
    assert cap.load("call").height == pq.read_table(capture_file, filters=[("record", "=", "call")]).num_rows


def test_version_1_files_read_with_source_null(capture_file, tmp_path):
    # a v1 file is a v2 file without the frame.source column
    t = pq.read_table(capture_file)
    v1 = t.drop_columns(["source", "domain", "clipped"]).replace_schema_metadata(
        {**t.schema.metadata, VERSION_KEY.encode(): b"1", HASH_KEY.encode(): HASH_PLACEHOLDER.encode()})
    _write_raw(tmp_path / "v1.parquet", v1)
    seal(tmp_path / "v1.parquet")
    cap = open_capture(tmp_path / "v1.parquet")
    frames = cap.load("frame")
    assert frames.columns == [c for c in TABLES["frame"] if c != "record"]
    assert frames.height == open_capture(capture_file).load("frame").height > 0
    assert frames["source"].null_count() == frames.height
    # the same file claiming v2 lacks a column
    _write_raw(tmp_path / "bad.parquet", v1.replace_schema_metadata(
        {**v1.schema.metadata, VERSION_KEY.encode(): b"2"}))
    seal(tmp_path / "bad.parquet")
    with pytest.raises(SchemaError, match="lacks column.*source"):
        open_capture(tmp_path / "bad.parquet")


def test_missing_and_mistyped_columns_are_named(capture_file, tmp_path):
    t = pq.read_table(capture_file)
    meta = t.schema.metadata
    dropped = t.drop_columns(["grid_x"]).replace_schema_metadata(meta)
    _write_raw(tmp_path / "a.parquet", dropped)
    with pytest.raises(SchemaError, match="lacks column.*grid_x"):
        open_capture(tmp_path / "a.parquet")
    i = t.schema.get_field_index("ts_ns")
    retyped = t.set_column(i, "ts_ns", t.column("ts_ns").cast(pa.float64())).replace_schema_metadata(meta)
    _write_raw(tmp_path / "b.parquet", retyped)
    with pytest.raises(SchemaError, match="ts_ns is Float64, expected int64"):
        open_capture(tmp_path / "b.parquet")


@pytest.mark.parametrize("cut", [0, 3, 100, -8])
def test_empty_and_truncated_files_are_input_errors(capture_file, tmp_path, cut):
    data = capture_file.read_bytes()
    path = tmp_path / "cut.parquet"
    path.write_bytes(data[:cut])
    with pytest.raises(InputError) as e:
        open_capture(path)
    assert "\n" not in str(e.value)


def test_read_hash_is_what_parquet_readers_read(capture_file, tmp_path):
    from zym.schemas.integrity import CorruptCaptureError, read_hash, verify

    bundled = pl.read_parquet_metadata(capture_file)[HASH_KEY]
    assert read_hash(capture_file) == bundled and bundled != HASH_PLACEHOLDER
    verify(capture_file, read_hash(capture_file))
    for name in ("gpt_decode_server.parquet",):   # a capture of the real collector
        real = Path(__file__).resolve().parents[2] / "sample_traces" / name
        # the footer's key-value metadata (pyarrow's *schema* metadata is the Arrow schema
        # as written before sealing: it holds the placeholder)
        assert read_hash(real) == pq.read_metadata(real).metadata[HASH_KEY.encode()].decode()
    plain = tmp_path / "plain.parquet"   # Parquet without the key: no claim
    pl.DataFrame({"a": [1]}).write_parquet(plain)
    assert read_hash(plain) is None
    both = tmp_path / "both.parquet"     # the key's text in another value: not the key's value
    pq.write_table(pa.table({"a": [1]}).replace_schema_metadata(
        {"note": f"{HASH_KEY} {HASH_PLACEHOLDER}"}), both)
    assert read_hash(both) is None
    (tmp_path / "text.parquet").write_text("not parquet at all")
    with pytest.raises(CorruptCaptureError):
        read_hash(tmp_path / "text.parquet")


def test_a_table_not_given_is_written_empty(tmp_path):
    """Tables a producer leaves out (here spans and ranges), or hands as a frame of no columns,
    are empty in the file, with their columns (polars 1.x made a frame of no columns one row of
    nulls, which the required-column check refused)."""
    tables = small_tables()
    given = {t: tables[t] for t in ("frame", "stack", "call", "gpu")} | {"span": pl.DataFrame()}
    path = write_capture(tmp_path / "c.parquet", given, CaptureMeta(producer="test"))
    cap = open_capture(path)
    for t in ("span", "range"):
        df = cap.load(t)
        assert df.height == 0 and set(df.columns) == set(polars_schema(t)) - {"record"}
    assert cap.load("call").height == tables["call"].height
