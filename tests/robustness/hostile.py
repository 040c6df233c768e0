"""Builders of hostile inputs for the robustness tests, and a runner of zym as a user runs it.

``zym(*args)`` runs the installed CLI in a subprocess (so signals, exit codes, stderr and time
are real) and returns the completed process; every run has a time limit and an address-space
limit, so a hang or a memory blow-up fails the test instead of stalling the suite.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from zym.schemas.integrity import HASH_KEY, HASH_PLACEHOLDER, seal
from zym.schemas.meta import META_KEY, VERSION_KEY
from zym.schemas.tables import arrow_schema

REPO = Path(__file__).resolve().parents[2]
SAMPLE_JSON = REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"
SAMPLE_PARQUET = REPO / "sample_traces" / "gpt_decode_server.parquet"
MEMORY_LIMIT = 3 << 30  # bytes of address space for one zym run (the sample needs ~1 GB)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def zym(*args: str | os.PathLike, timeout: float = 120, cwd: Path | None = None,
        memory: bool = True) -> subprocess.CompletedProcess:
    """Run ``zym ARGS`` (``python -m zym.cli.main``) with a time and memory limit."""
    cmd = [sys.executable, "-m", "zym.cli.main", *map(os.fspath, args)]
    return subprocess.run(cmd, check=False, capture_output=True, timeout=timeout, cwd=cwd,
                          preexec_fn=_limit_memory if memory else None,
                          env={**os.environ, "COLUMNS": "120"})


def assert_clean_error(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    """The run failed as promised: exit ``code``, one ``zym: error:`` line, no traceback."""
    err = proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err[-2000:]
    assert proc.returncode == code, (proc.returncode, err[-2000:])
    assert "zym: error:" in err, err[-2000:]
    return err


def write_sealed(path: Path, rows: dict[str, list], meta: dict | None = None,
                 version: str = "1") -> Path:
    """A capture file with exactly ``rows`` (columns of the file schema, others null), sealed
    with a valid content hash: what a hostile producer can write, bypassing conform()."""
    schema = arrow_schema()
    n = len(next(iter(rows.values())))
    cols = [pa.array(rows[f.name], f.type) if f.name in rows else pa.nulls(n, f.type)
            for f in schema]
    kv = {VERSION_KEY: version, META_KEY: json.dumps(meta or {"producer": "test"}),
          HASH_KEY: HASH_PLACEHOLDER}
    pq.write_table(pa.Table.from_arrays(cols, schema=schema.with_metadata(kv)), path)
    seal(path)
    return path


def frame_rows(n: int) -> dict[str, list]:
    return {"record": ["frame"] * n, "frame_id": list(range(n)), "kind": ["python"] * n,
            "name": [f"f{i}" for i in range(n)], "file": ["a.py"] * n, "line": [1] * n}


def capture_rows(stack: list[tuple[int, int | None, int, int]], calls: int = 3,
                 names: tuple[str, ...] = ("f",)) -> dict[str, list]:
    """Frames, the given stack rows ``(stack_id, parent_id, frame_id, depth)``, and ``calls``
    launch calls on the last stack, each with a kernel."""
    rows = {k: list(v) for k, v in frame_rows(max(len(names), 1 + max(s[2] for s in stack))).items()}

    def add(**cols):
        n, before = len(next(iter(cols.values()))), len(rows["record"])
        for k in set(rows) | set(cols):
            rows.setdefault(k, [None] * before)
            rows[k] += cols.get(k, [None] * n)

    add(record=["stack"] * len(stack), stack_id=[s[0] for s in stack],
        parent_id=[s[1] for s in stack], frame_id=[s[2] for s in stack],
        depth=[s[3] for s in stack])
    leaf = stack[-1][0]
    add(record=["call"] * calls, pid=[1] * calls, tid=[1] * calls,
        ts_ns=[1000 * i for i in range(calls)], dur_ns=[10] * calls,
        name=["cudaLaunchKernel"] * calls, kind=["launch"] * calls,
        correlation_id=list(range(calls)), stack_id=[leaf] * calls)
    add(record=["gpu"] * calls, pid=[1] * calls, device_id=[0] * calls, stream_id=[7] * calls,
        ts_ns=[1000 * i + 50 for i in range(calls)], dur_ns=[100] * calls,
        name=["k"] * calls, kind=["kernel"] * calls, correlation_id=list(range(calls)))
    return rows
