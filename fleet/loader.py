"""``ingest(store, files)``: captures into the fleet store, each once.

A capture with a current sidecar (``zym fleet stage``, :mod:`zym.fleet.sidecar`: its rows
staged where it was made, by this zym, from bytes that hash to its content hash) is not
analysed: the store loads its staged files, every sidecar of a batch in one statement a table.
Any other capture is analysed (:mod:`zym.fleet.prepare`, in ``jobs`` processes), its rows written as
Parquet files in a staging folder, and the store loads them (chDB reads the files itself, one
statement per table for a batch of captures; a server receives them as Parquet).
The ``captures`` row goes in last, so a capture is in the store exactly when its row is: a
capture whose rows were cut short (zym killed mid-load) is cleared and loaded again next time,
and one that is already in is skipped (its content hash is its key).
"""
from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from zym.schemas.errors import InputError

from .prepare import PREPARED, Prepared, capture_id, prepare_chunk
from .schema import LOAD_ORDER, columns, ensure
from .store import sql_string

BATCH = 128
STAGED_BATCH = 1024  # sidecars per load (no analysis to overlap: fewer, larger parts)
Progress = Callable[[str], None]


@dataclass
class IngestResult:
    ingested: int = 0
    skipped: int = 0  # already in the store (same content hash), or named twice
    rows: dict[str, int] = field(default_factory=dict)
    staged: int = 0  # of ``ingested``: loaded from a current sidecar, not analysed
    stale: int = 0  # sidecars not used (another capture's hash, another zym): analysed
    analysis_s: float = 0.0  # analysing the captures and writing their rows (prepare)
    check_s: float = 0.0  # hashing captures that have a sidecar, reading its manifest
    load_s: float = 0.0  # the store loading the rows

    def to_dict(self) -> dict:
        gpu = self.rows.get("gpu_ops", 0)
        return {"ingested": self.ingested, "skipped": self.skipped, "staged": self.staged,
                "stale": self.stale, "rows": self.rows,
                "analysis_s": round(self.analysis_s, 3), "check_s": round(self.check_s, 3),
                "load_s": round(self.load_s, 3),
                "gpu_op_rows_per_s_load": round(gpu / self.load_s) if self.load_s else None,
                "gpu_op_rows_per_s_total": (round(gpu / (self.load_s + self.analysis_s))
                                            if self.load_s + self.analysis_s else None)}


def ensure_schema(store) -> None:
    ensure(store)


ID_CHUNK = 256  # ids per IN (...) list: a query's text stays far below max_query_size


def _chunks(ids: Sequence[str]):
    for at in range(0, len(ids), ID_CHUNK):
        yield ", ".join(map(sql_string, ids[at:at + ID_CHUNK]))


def ids_in_store(store, ids: Sequence[str]) -> set[str]:
    found: set[str] = set()
    for id_list in _chunks(ids):
        rows = store.query(f"SELECT capture_id FROM {store.database}.captures FINAL "
                           f"WHERE capture_id IN ({id_list})")
        found.update(rows.column("capture_id").to_pylist())
    return found


def ingest(store, files: Sequence[str | Path], labels: dict[str, str] | None = None,
           jobs: int = 1, progress: Progress | None = None, staged: bool = True
           ) -> IngestResult:
    """Load ``files`` (zym capture Parquet files) into ``store``; returns what was done.
    ``staged=False``: analyse every capture, even one with a current sidecar."""
    ensure_schema(store)
    result = IngestResult()
    todo: dict[str, Path] = {}
    for f in files:
        path = Path(f)
        if not path.is_file():
            raise InputError(f"{path}: no such capture file")
        cid = capture_id(path)
        if cid in todo:
            result.skipped += 1
        else:
            todo[cid] = path
    present = ids_in_store(store, list(todo))
    result.skipped += len(present)
    pending = [(cid, p) for cid, p in todo.items() if cid not in present]
    _clear_partial(store, [cid for cid, _ in pending])
    t = time.perf_counter()
    manifests = _current_sidecars(pending, result) if staged else {}
    result.check_s = time.perf_counter() - t
    from_sidecar = [(cid, p) for cid, p in pending if cid in manifests]
    pending = [(cid, p) for cid, p in pending if cid not in manifests]
    staging_root = Path(store.path) if store.kind == "chdb" else None
    with tempfile.TemporaryDirectory(prefix="zym-fleet-", dir=staging_root) as tmp:
        total = len(from_sidecar) + len(pending)
        for at in range(0, len(from_sidecar), STAGED_BATCH):
            batch = from_sidecar[at:at + STAGED_BATCH]
            stage = Path(tmp) / f"s{at}"
            prepared = _link_sidecars(batch, manifests, stage, labels or {})
            t1 = time.perf_counter()
            _load(store, prepared, stage, result)
            result.load_s += time.perf_counter() - t1
            result.ingested += len(prepared)
            result.staged += len(prepared)
            shutil.rmtree(stage, ignore_errors=True)
            if progress:
                progress(f"{result.ingested}/{total} captures ingested")
        if pending:
            _ingest_raw(store, pending, Path(tmp), jobs, labels or {}, result, progress, total)
    return result


def _current_sidecars(pending: list[tuple[str, Path]], result: IngestResult) -> dict[str, dict]:
    """capture id -> manifest, for each capture whose sidecar is current. A capture with a
    sidecar is hashed whole first (two threads: hashlib releases the GIL): the sidecar is
    used only for the bytes it was staged from."""
    from concurrent.futures import ThreadPoolExecutor

    from zym.schemas.integrity import verify

    from .sidecar import fingerprint, path_of, read

    have = [(cid, p) for cid, p in pending if path_of(p).is_dir()]
    if not have:
        return {}
    fp = fingerprint()

    def check(item):
        cid, p = item
        verify(p, "sha256:" + cid)
        return cid, read(p, cid, fp)

    with ThreadPoolExecutor(2) as pool:
        found = dict(pool.map(check, have))
    result.stale += sum(m is None for m in found.values())
    return {cid: m for cid, m in found.items() if m is not None}


def _link_sidecars(batch: list[tuple[str, Path]], manifests: dict[str, dict], stage: Path,
                   labels: dict[str, str]) -> list[Prepared]:
    """The batch's ``Prepared`` bookkeeping from its manifests (the rows stay in the
    sidecars; a sidecar whose folder name a glob would misread gets a plain-named link in
    ``stage``)."""
    from .sidecar import path_of

    stage.mkdir(parents=True)
    out = []
    for i, (cid, path) in enumerate(batch):
        m = manifests[cid]
        row = dict(m["row"])
        row["labels"] = dict(row["labels"]) | labels
        service = row["labels"].get("service", "")
        folder = path_of(path).resolve()
        if _GLOB_CHARS.search(str(folder)):
            (stage / f"l{i}").symlink_to(folder, target_is_directory=True)
            folder = stage / f"l{i}"
        p = Prepared(cid, path, row | {"service": service, "file": str(path)},
                     {k: int(v) for k, v in m["counts"].items()}, sidecar=folder,
                     set_service=service if service != row["service"] else None)
        out.append(p)
    return out


_GLOB_CHARS = re.compile(r"[{}*?\[\],'\\]")


def _ingest_raw(store, pending: list[tuple[str, Path]], tmp: Path, jobs: int,
                labels: dict[str, str], result: IngestResult, progress: Progress | None,
                total: int) -> None:
    """Analyse ``pending`` (``jobs`` processes) and load their rows, a batch at a time."""
    with _pool(jobs) as pool:
        for at in range(0, len(pending), BATCH):
            batch = pending[at:at + BATCH]
            stage = tmp / f"b{at}"
            t0 = time.perf_counter()
            prepared = _prepare_all(pool, max(jobs, 1), batch, stage, labels)
            t1 = time.perf_counter()
            _load(store, prepared, stage, result)
            result.load_s += time.perf_counter() - t1
            result.analysis_s += t1 - t0
            result.ingested += len(prepared)
            shutil.rmtree(stage, ignore_errors=True)
            if progress:
                progress(f"{result.ingested}/{total} captures ingested")


class _Serial:
    def map(self, fn, *args):
        return map(fn, *args)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _pool(jobs: int):
    if jobs <= 1:
        return _Serial()
    return ProcessPoolExecutor(jobs, mp_context=get_context("spawn"))


def _prepare_all(pool, jobs: int, batch: list[tuple[str, Path]], stage: Path,
                 labels: dict[str, str]) -> list[Prepared]:
    chunks = [batch[i::jobs] for i in range(jobs) if batch[i::jobs]]
    folders = [stage / f"part{i}" for i in range(len(chunks))]
    out = [p for part in pool.map(prepare_chunk, [[p for _, p in c] for c in chunks], folders,
                                  [labels] * len(chunks)) for p in part]
    by_path = {str(p.file): p for p in out}
    for cid, path in batch:
        if by_path[str(path)].capture_id != cid:  # changed between reading its id and now
            raise InputError(f"{path}: changed while being ingested")
    return out


def _load(store, prepared: list[Prepared], stage: Path, result: IngestResult) -> None:
    for table in LOAD_ORDER:
        if table in PREPARED:
            _load_staged(store, table, stage, prepared)
        else:
            _load_captures(store, prepared, stage)
        result.rows[table] = result.rows.get(table, 0) + sum(
            p.counts.get(table, 0) for p in prepared)


def _load_staged(store, table: str, stage: Path, prepared: list[Prepared]) -> None:
    """The batch's rows of ``table``: from sidecars (``sidecar.py``: all in one statement,
    but those the ingest's labels give another service, each with it set), and Parquet parts
    of this ingest's analysis (``part<i>/``)."""
    plain = [p for p in prepared if p.sidecar is not None and p.set_service is None]
    if plain:
        store.load_native(table, [p.sidecar for p in plain],
                          rows=sum(p.counts.get(table, 0) for p in plain))
    for p in prepared:
        if p.sidecar is not None and p.set_service is not None:
            store.load_native(table, [p.sidecar], replace={"service": p.set_service})
    if not any(stage.glob("part*")):
        return
    if store.kind == "chdb":  # one statement: chDB reads every part's file by glob
        store.load_parquet(table, stage / "part*" / f"{table}.parquet")
    else:
        for f in sorted(stage.glob(f"part*/{table}.parquet")):
            store.load_parquet(table, f)


def _load_captures(store, prepared: list[Prepared], stage: Path) -> None:
    import polars as pl

    rows = [p.row | {"label_keys": list(p.row["labels"]),
                     "label_values": list(p.row["labels"].values())} for p in prepared]
    cols = [c for c in columns("captures") if c != "labels"]
    df = pl.DataFrame([{c: r[c] for c in cols} | {"label_keys": r["label_keys"],
                                                  "label_values": r["label_values"]}
                       for r in rows],
                      schema_overrides={"label_keys": pl.List(pl.String),
                                        "label_values": pl.List(pl.String)})
    df = df.with_columns(pl.col("capture_time", "end_time").cast(pl.Datetime("ms", "UTC")))
    path = stage / "captures.parquet"
    df.write_parquet(path)
    select = ", ".join("mapFromArrays(label_keys, label_values) AS labels" if c == "labels"
                       else c for c in columns("captures"))
    store.load_parquet("captures", path, select=select)
    for p in prepared:
        p.counts["captures"] = 1


def _clear_partial(store, ids: list[str]) -> None:
    """Rows of captures whose load did not finish (no ``captures`` row): removed."""
    if not ids:
        return
    stale: set[str] = set()
    for id_list in _chunks(ids):
        union = " UNION DISTINCT ".join(
            f"SELECT DISTINCT capture_id FROM {store.database}.{t} "
            f"WHERE capture_id IN ({id_list})" for t in LOAD_ORDER[:-1])
        stale.update(store.query(union).column("capture_id").to_pylist())
    for stale_list in _chunks(sorted(stale)):
        for table in LOAD_ORDER[:-1]:
            store.command(f"DELETE FROM {store.database}.{table} "
                          f"WHERE capture_id IN ({stale_list})")
