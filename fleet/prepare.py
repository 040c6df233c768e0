"""One capture -> the fleet store's rows for it, from the capture's own analysis.

Nothing here measures anything: every number is the per-capture analysis' (``analyze()`` with
``window="all"``, so a capture counts whole) and the rules' (``zym.rules.evaluate``). GPU
operations and calls keep the path and site the analysis attributed them to, so a fleet sum is
the sum of the per-capture analyses; ``gpu_sums`` and ``call_sums`` sum those same rows here,
where the capture is analysed, so the store only loads. Frames and stacks are the capture's
own, as the analysis read them. The tables are written as Parquet files that the store loads
itself (:meth:`zym.fleet.store.ChdbStore.load_parquet`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

import polars as pl
from zym.schemas.errors import InputError
from zym.schemas.integrity import HASH_KEY

from .schema import columns

# The tables prepare writes per capture (all but ``captures``, whose rows the loader writes).
PREPARED = ("frames", "stacks", "gpu_ops", "calls", "gpu_sums", "call_sums", "paths", "findings")


@dataclass
class Prepared:
    """A capture's rows: ``tables`` in memory until :func:`prepare_chunk` writes them."""

    capture_id: str
    file: Path
    row: dict  # its ``captures`` row
    counts: dict[str, int] = field(default_factory=dict)
    tables: dict[str, pl.DataFrame] | None = field(default=None, repr=False)
    sidecar: Path | None = None  # its rows staged there (``sidecar.py``), not in ``tables``
    set_service: str | None = None  # the sidecar's rows load with this service (ingest labels)


def capture_id(path: Path) -> str:
    """The capture's content hash (hex digits), read from its footer; checked when analyzed.
    From the footer's bytes where they hold it as zym writes it (a Parquet reader took ~1 ms a
    file: a second per 1,000 captures at ingest), else through polars."""
    from zym.schemas.integrity import CorruptCaptureError, read_hash

    try:
        value = read_hash(path)
    except (CorruptCaptureError, OSError):
        value = None
    if value is not None:
        return value.removeprefix("sha256:")
    try:
        kv = pl.read_parquet_metadata(path)
    except Exception as e:  # noqa: BLE001 (polars raises several types for a bad footer)
        raise InputError(f"{path}: not a readable capture file ({' '.join(str(e).split())[:120]})"
                         ) from None
    value = kv.get(HASH_KEY)
    if not value or not value.startswith("sha256:"):
        raise InputError(f"{path}: no {HASH_KEY} in its metadata: not a zym capture (import "
                         "Kineto traces with `zym import` first)")
    return value.removeprefix("sha256:")


def _times(meta, window_ns: int) -> tuple[int, int]:
    """(start, end) of the capture, Unix ns: the interval a rotated capture states, else the
    time the capture was written minus its window."""
    interval = (meta.extra or {}).get("interval") if isinstance(meta.extra, dict) else None
    if isinstance(interval, dict) and isinstance(interval.get("start_unix_ns"), int):
        start = interval["start_unix_ns"]
        end = interval.get("end_unix_ns")
        return start, end if isinstance(end, int) else start + window_ns
    try:
        written = datetime.fromisoformat(meta.created_at)
    except (TypeError, ValueError):
        written = datetime(1970, 1, 1, tzinfo=timezone.utc)
    if written.tzinfo is None:
        written = written.replace(tzinfo=timezone.utc)
    end = int(written.timestamp() * 1e9)
    return end - window_ns, end


def labels_of(meta, extra: dict[str, str]) -> dict[str, str]:
    """The capture's labels (``meta.extra["labels"]``, written by ``zym capture --label``)
    with the ingest's ``--label`` on top."""
    own = (meta.extra or {}).get("labels") if isinstance(meta.extra, dict) else None
    labels = {str(k): str(v) for k, v in own.items()} if isinstance(own, dict) else {}
    return labels | extra


def prepare_chunk(paths: list[Path], folder: Path, extra_labels: dict[str, str] | None = None
                  ) -> list[Prepared]:
    """Analyze each of ``paths`` and write their rows together under ``folder``, one
    ``<table>.parquet`` per table (fewer, larger files load faster)."""
    out = [prepare(p, extra_labels) for p in paths]
    folder.mkdir(parents=True, exist_ok=True)
    for name in PREPARED:
        frames = [p.tables[name] for p in out]
        if frames:
            pl.concat(frames).write_parquet(folder / f"{name}.parquet", compression="lz4",
                                            statistics=False)
    for p in out:
        p.tables = None
    return out


@cache
def _packs() -> tuple:
    """The rule packs `zym analyze` runs (built-in and plugins), read once per process: ~0.1 s
    a capture otherwise, a sixth of its analysis."""
    from zym.rules import load_packs

    return tuple(load_packs())


def prepare(path: Path, extra_labels: dict[str, str] | None = None) -> Prepared:
    """Analyze ``path``: its rows for every fleet table."""
    from zym.analysis import analyze
    from zym.rules import evaluate

    cid = capture_id(path)
    analysis = analyze(path, window="all")
    findings = evaluate(analysis, packs=_packs())
    meta = analysis.data.meta
    lo, hi = analysis.window
    start, end = _times(meta, hi - lo)
    labels = labels_of(meta, extra_labels or {})
    keys = {"capture_id": cid, "capture_time": start // 1_000_000, "host": meta.host or "",
            "service": labels.get("service", "")}
    paths = analysis.call_paths.paths
    site = paths.select("path_id", "site")
    gpu = _gpu_ops(analysis.facts.gpu, site)
    calls = _calls(analysis.facts.calls, site)
    tables = {
        "frames": _own(analysis.data.frames),
        "stacks": _own(analysis.data.stacks),
        "gpu_ops": gpu,
        "calls": calls,
        "gpu_sums": _sums(gpu, ["work", "name", "site"], "ops"),
        "call_sums": _sums(calls, ["blocking", "api", "site"], "calls"),
        "paths": paths,
        "findings": _findings(findings),
    }
    keyed = {name: _keyed(df, keys, name) for name, df in tables.items()}
    counts = {name: df.height for name, df in keyed.items()}
    steps = analysis.phases.steps
    row = keys | {
        "end_time": end // 1_000_000, "labels": labels, "file": str(path),
        "producer": meta.producer, "window_ns": hi - lo, "gpu_ns": analysis.facts.gpu_ns,
        "cpu_blocked_ns": int(paths["cpu_blocked_ns"].sum() or 0),
        "calls": analysis.facts.calls.height, "gpu_ops": analysis.facts.gpu.height,
        "steps": steps.count if steps is not None else 0, "findings": len(findings),
        "saving_ns": int(sum(f.saving_ns or 0 for f in findings)),
    }
    return Prepared(cid, path, row, counts, keyed)


def _keyed(df: pl.DataFrame, keys: dict, table: str) -> pl.DataFrame:
    """``df`` with the capture's key columns in front, in the table's column order."""
    key_cols = [pl.lit(keys["capture_id"]).alias("capture_id"),
                pl.lit(keys["capture_time"]).cast(pl.Datetime("ms", "UTC")).alias("capture_time"),
                pl.lit(keys["host"]).alias("host"), pl.lit(keys["service"]).alias("service")]
    return df.with_columns(key_cols).select(columns(table))


def _own(df: pl.DataFrame) -> pl.DataFrame:
    """The capture's own frames or stacks as its file has them (categoricals as strings)."""
    return df.with_columns(pl.col(c).cast(pl.String) for c, t in df.schema.items()
                           if t == pl.Categorical)


def _sums(rows: pl.DataFrame, keys: list[str], count: str) -> pl.DataFrame:
    """``rows`` summed per key: duration and count (``gpu_sums``, ``call_sums``)."""
    return rows.group_by(keys).agg(pl.col("dur_ns").sum(), pl.len().cast(pl.Int64).alias(count))


def _gpu_ops(gpu: pl.DataFrame, site: pl.DataFrame) -> pl.DataFrame:
    from zym.analysis.callpath import UNKNOWN_STACK

    return (gpu.select("ts_ns", "dur_ns", "device_id", "stream_id", pl.col("name").cast(pl.String),
                       pl.col("kind").cast(pl.String), pl.col("op_class").cast(pl.String),
                       pl.col("work").cast(pl.UInt8), "size_bytes", "graph_id",
                       "correlation_id",
                       pl.col("stack_id").fill_null(UNKNOWN_STACK).alias("path_id"))
            .join(site, on="path_id", how="left", maintain_order="left")
            .with_columns(pl.col("site").fill_null("(unknown stack)")))


def _calls(calls: pl.DataFrame, site: pl.DataFrame) -> pl.DataFrame:
    from zym.analysis.callpath import UNKNOWN_STACK

    return (calls.select("pid", "tid", "ts_ns", "dur_ns", pl.col("api").cast(pl.String),
                         pl.col("kind").cast(pl.String), pl.col("blocking").cast(pl.UInt8),
                         "bytes", pl.col("copy_kind").cast(pl.String), "correlation_id",
                         pl.col("stack_id").fill_null(UNKNOWN_STACK).alias("path_id"))
            .join(site, on="path_id", how="left", maintain_order="left")
            .with_columns(pl.col("site").fill_null("(unknown stack)")))


def _findings(findings) -> pl.DataFrame:
    rows = [{"rank": i, "rule_id": f.rule_id, "severity": f.severity, "title": f.title,
             "site": f.site, "site_id": f.site_id, "cost_ns": int(f.cost_ns),
             "saving_ns": f.saving_ns, "occurrences": f.occurrence_count,
             "message": f.message, "fix": f.fix} for i, f in enumerate(findings)]
    schema = {"rank": pl.Int32, "rule_id": pl.String, "severity": pl.String, "title": pl.String,
              "site": pl.String, "site_id": pl.Int64, "cost_ns": pl.Int64,
              "saving_ns": pl.Int64, "occurrences": pl.Int64, "message": pl.String,
              "fix": pl.String}
    return pl.DataFrame(rows, schema=schema)
