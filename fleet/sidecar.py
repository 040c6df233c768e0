"""Staged fleet rows beside a capture (a *sidecar*), so that the store only loads.

``zym fleet stage CAPTURE…`` runs where captures are made (each GPU host, e.g. after
``zym capture --rotate`` writes one): it analyses each capture as ``zym fleet ingest`` would
(:func:`zym.fleet.prepare.prepare`: analysis, rules, sums) and writes the rows of every fleet
table next to it, in ``CAPTURE.zymfleet/``:

* ``manifest.json``: the capture's content hash (``zym.content_hash``, sha256 of every byte of
  the capture), the fingerprint of the code that analysed it (:func:`fingerprint`), the
  capture's row for ``captures`` (its own labels), its key columns and row counts;
* ``<table>.native.lz4`` per table: ClickHouse's Native format with the store's column types
  (``schema.TABLES``: ``LowCardinality`` included), sorted by the table's ``ORDER BY``,
  LZ4-framed; written by chDB, so the store reads it without converting a type or sorting
  (about half the load's time with Parquet: ``docs/benchmarks.md``).

``zym fleet ingest`` uses a sidecar only when the capture's bytes hash to the hash the manifest
names (the capture is re-hashed at ingest: a footer that claims a hash is not enough) and the
fingerprint is the ingesting zym's own; any other sidecar is stale and the capture is analysed
as if it had none. The directory is written under a temporary name and renamed into place, so
a sidecar is whole or absent.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from functools import cache
from pathlib import Path

from .prepare import PREPARED, Prepared, capture_id, prepare
from .schema import ORDER

SUFFIX = ".zymfleet"
FORMAT = 1
EXT = "native.lz4"


def path_of(capture: Path) -> Path:
    """The sidecar folder of ``capture``: ``CAPTURE.zymfleet`` beside it."""
    return capture.with_name(capture.name + SUFFIX)


@cache
def fingerprint() -> str:
    """What the staged rows depend on besides the capture: this sidecar format, zym's
    analysis, rules, schemas and fleet-preparation code (the bytes of their files), the rule
    packs ``prepare`` runs (built-in and plugins, by content) and polars' version. A zym
    that differs in any of them does not use another's sidecars."""
    import polars as pl
    import zym.analysis
    import zym.rules
    import zym.schemas

    from .prepare import _packs

    h = hashlib.sha256(f"zymfleet {FORMAT} polars {pl.__version__}\n".encode())
    here = Path(__file__).resolve().parent
    files = [here / "prepare.py", here / "schema.py", here / "sidecar.py"]
    for pkg in (zym.analysis, zym.rules, zym.schemas):
        root = Path(pkg.__file__).resolve().parent
        files += sorted(f for f in root.rglob("*") if f.is_file()
                        and f.suffix in (".py", ".pyx", ".so", ".yaml", ".yml", ".json")
                        and "__pycache__" not in f.parts)
    files += [Path(p.source) for p in _packs() if p.source]
    for f in files:
        h.update(str(f.name).encode() + b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()


def _engine():
    """A chDB connection to convert with: the store open in this process, if any (chDB allows
    one session a process), else an in-memory one."""
    from .store import _OPEN

    for store in _OPEN.values():
        return store
    from .store import ChdbMemory

    return ChdbMemory()


def write(prepared: Prepared, fp: str | None = None) -> Path:
    """Write ``prepared`` (its ``tables`` still in memory) as the sidecar of its capture."""
    from .store import _structure, sql_string

    capture = Path(prepared.file)
    final = path_of(capture)
    tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.mkdir(parents=True)
    try:
        engine = _engine()
        for name in PREPARED:
            df = prepared.tables[name]
            src = tmp / f"{name}.parquet"
            df.write_parquet(src, compression="uncompressed", statistics=False)
            dst = tmp / f"{name}.{EXT}"
            engine.command(
                f"INSERT INTO FUNCTION file({sql_string(str(dst))}, Native, "
                f"{sql_string(_structure(name))}, 'lz4') SELECT * FROM "
                f"file({sql_string(str(src))}, Parquet) ORDER BY {ORDER[name]} SETTINGS "
                "use_structure_from_insertion_table_in_table_functions = 0, "
                "engine_file_truncate_on_insert = 1")
            src.unlink()
        row = {k: v for k, v in prepared.row.items() if k != "file"}
        manifest = {"format": FORMAT, "fingerprint": fp or fingerprint(),
                    "capture_id": prepared.capture_id, "capture_bytes": capture.stat().st_size,
                    "row": row, "counts": prepared.counts}
        (tmp / "manifest.json").write_text(json.dumps(manifest))
        old = None
        if final.exists():
            old = final.with_name(f".{final.name}.{uuid.uuid4().hex[:8]}.old")
            os.rename(final, old)
        os.rename(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def read(capture: Path, cid: str, fp: str | None = None) -> dict | None:
    """The manifest of ``capture``'s sidecar when it is current: staged from a capture whose
    content hash is ``cid`` (the caller has verified the capture's bytes hash to it) by code
    with this fingerprint, every table file present. ``None``: no sidecar, or a stale one."""
    folder = path_of(capture)
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(manifest, dict) and manifest.get("format") == FORMAT
            and manifest.get("capture_id") == cid
            and manifest.get("fingerprint") == (fp or fingerprint())
            and isinstance(manifest.get("row"), dict)
            and isinstance(manifest.get("counts"), dict)):
        return None
    if not all((folder / f"{name}.{EXT}").is_file() for name in PREPARED):
        return None
    return manifest


def verified_id(capture: Path) -> str:
    """The capture's content hash, checked against every byte of the file (raises
    ``CorruptCaptureError`` when they differ)."""
    from zym.schemas.integrity import verify

    cid = capture_id(capture)
    verify(capture, "sha256:" + cid)
    return cid


def stage(paths: list[Path], force: bool = False) -> list[tuple[Path, str]]:
    """Stage each capture of ``paths`` (analysis, rules, the fleet rows) unless its sidecar is
    current (``force``: always). Returns (capture, "staged" | "current") per capture."""
    fp = fingerprint()
    out = []
    for p in paths:
        p = Path(p)
        cid = verified_id(p)
        if not force and read(p, cid, fp) is not None:
            out.append((p, "current"))
            continue
        prepared = prepare(p)
        if prepared.capture_id != cid:  # changed between the check and the analysis
            from zym.schemas.errors import InputError

            raise InputError(f"{p}: changed while being staged")
        write(prepared, fp)
        out.append((p, "staged"))
    return out


def stage_many(paths, jobs: int = 1, force: bool = False) -> list[tuple[Path, str]]:
    """:func:`stage` over ``paths`` in ``jobs`` processes (each its own chDB)."""
    from zym.schemas.errors import InputError

    files = []
    for p in paths:
        p = Path(p)
        if not p.is_file():
            raise InputError(f"{p}: no such capture file")
        if p not in files:
            files.append(p)
    if jobs <= 1 or len(files) <= 1:
        return stage(files, force)
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    chunks = [files[i::jobs] for i in range(jobs) if files[i::jobs]]
    with ProcessPoolExecutor(len(chunks), mp_context=get_context("spawn")) as pool:
        return [r for part in pool.map(stage, chunks, [force] * len(chunks)) for r in part]
