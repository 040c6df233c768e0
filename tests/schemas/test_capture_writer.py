"""``CaptureWriter`` encodes each row group on a thread while the caller makes the next: the
file is the one written in order, and a row group that fails to write fails the whole file
(nothing left behind, the old file kept), wherever the failure surfaces."""
from __future__ import annotations

import polars as pl
import pyarrow.parquet as pq
import pytest
from zym.schemas import CaptureMeta, open_capture
from zym.schemas.errors import OutputError
from zym.schemas.io import ROW_GROUP_ROWS, CaptureWriter


def _calls(n: int, start: int) -> pl.DataFrame:
    return pl.DataFrame({"pid": [1] * n, "tid": [2] * n,
                         "ts_ns": list(range(start, start + n)), "dur_ns": [5] * n,
                         "name": ["cudaLaunchKernel"] * n, "kind": ["launch"] * n,
                         "correlation_id": list(range(start, start + n))})


def test_parts_land_in_order_as_row_groups_of_their_own(tmp_path):
    out = tmp_path / "c.parquet"
    parts = [_calls(n, i * 10_000) for i, n in enumerate((3, 1, 4, 1, 5))]
    with CaptureWriter(out, CaptureMeta(producer="test")) as w:
        for part in parts:
            w.write("call", part)
    got = open_capture(out).load("call").select(parts[0].columns)
    assert got.with_columns(pl.col("kind").cast(pl.String)).equals(pl.concat(parts))
    assert pq.ParquetFile(out).metadata.num_row_groups == len(parts)


@pytest.mark.parametrize("failing", [1, 3, 4])  # the first in flight, a later one, the last
def test_a_row_group_that_fails_fails_the_file(tmp_path, monkeypatch, failing):
    out = tmp_path / "c.parquet"
    out.write_text("old")
    calls = {"n": 0}
    real = pq.ParquetWriter.write_table

    def flaky(self, table, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == failing:
            raise OSError(28, "No space left on device")
        return real(self, table, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", flaky)
    with (pytest.raises(OutputError, match="no space left.*the old file, if any, is unchanged"),
          CaptureWriter(out, CaptureMeta(producer="test")) as w):
        for i in range(4):
            w.write("call", _calls(10, i * 100))
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.parquet"]


def test_a_part_larger_than_a_row_group_is_split(tmp_path):
    out = tmp_path / "c.parquet"
    with CaptureWriter(out, CaptureMeta(producer="test")) as w:
        w.write("call", _calls(ROW_GROUP_ROWS + 7, 0))
    meta = pq.ParquetFile(out).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [
        ROW_GROUP_ROWS, 7]
    assert open_capture(out).rows("call") == ROW_GROUP_ROWS + 7


def test_a_kept_file_writes_times_and_growing_ids_as_deltas(tmp_path):
    """Times and the ids that grow with them are delta-encoded in a kept file (half the
    bytes of dictionaries on real traces), read back exactly, every other column
    dictionary-encoded; a temporary file keeps its fast encoding."""
    from zym.schemas.io import DELTA_COLUMNS

    calls = _calls(50_000, 7_000_000_000).with_columns(
        pl.col("dur_ns") + pl.int_range(pl.len()) % 97, pl.lit(None, pl.Int64).alias("op_id"))
    kept, temporary = tmp_path / "k.parquet", tmp_path / "t.parquet"
    for path, temp in ((kept, False), (temporary, True)):
        with CaptureWriter(path, CaptureMeta(producer="test"), temporary=temp) as w:
            w.write("call", calls)
        got = open_capture(path).load("call").select(calls.columns)
        assert got.with_columns(pl.col("kind").cast(pl.String)).equals(calls)

    def encodings(path) -> dict[str, set[str]]:
        meta = pq.ParquetFile(path).metadata
        out: dict[str, set[str]] = {}
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                col = meta.row_group(g).column(c)
                out.setdefault(col.path_in_schema, set()).update(col.encodings)
        return out

    enc = encodings(kept)
    for name in DELTA_COLUMNS:
        assert "DELTA_BINARY_PACKED" in enc[name], (name, enc[name])
        assert not any("DICTIONARY" in e for e in enc[name]), (name, enc[name])
    assert any("DICTIONARY" in e for e in enc["name"])
    assert all("DELTA_BINARY_PACKED" not in e for e in encodings(temporary)["ts_ns"])
