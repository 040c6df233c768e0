"""scripts/reseal_capture.py: a capture written before a column existed is rewritten through
today's writer (times as deltas, a content hash) with the same rows; a file it cannot read
gets one line and exit 2, and is left as it was."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
from zym.rules.testing import CaptureBuilder
from zym.schemas import open_capture

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reseal_capture.py"


def _run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True,
                          text=True, check=False)


def test_an_older_capture_is_rewritten_with_the_same_rows(tmp_path):
    b = CaptureBuilder()
    for _ in range(20):
        b.kernel([("python", "step", "app.py", 20)], "k", gpu_us=30)
        b.tick(50)
    path = b.write(tmp_path / "c.parquet")
    want = {t: open_capture(path).load(t) for t in ("call", "gpu", "frame", "stack")}
    # an older writer's file: no op_seq column (the column came later)
    pq.write_table(pq.read_table(path).drop_columns(["op_seq"]), path)
    got = _run(path)
    assert got.returncode == 0, got.stderr
    for table, rows in want.items():
        assert open_capture(path).load(table).equals(rows), table
    encodings = pq.ParquetFile(path).metadata.row_group(0)
    ts = encodings.column(pq.ParquetFile(path).schema_arrow.get_field_index("ts_ns"))
    assert "DELTA_BINARY_PACKED" in ts.encodings


def test_a_file_it_cannot_read_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"not parquet")
    got = _run(path)
    assert got.returncode == 2 and got.stdout == ""
    assert len(got.stderr.strip().splitlines()) == 1 and str(path) in got.stderr
    assert path.read_bytes() == b"not parquet"
