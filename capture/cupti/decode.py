"""Spool file -> capture tables, in bulk.

A spool (written by ``agent.py`` in the target) holds raw CUPTI activity buffers. Decoding walks
each buffer once to find its record offsets, gathers each record kind into one contiguous numpy
array viewed through that kind's structured dtype (``layouts.py``), and builds polars frames from
whole columns: no Python object per record.

>>> spool = read_spool("cupti-1234.spool")          # doctest: +SKIP
>>> tables = decode_spool(spool)                     # doctest: +SKIP
>>> tables.gpu.group_by("kind").len()                # doctest: +SKIP
"""
from __future__ import annotations

import ctypes as ct
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
from zym.schemas.apis import api_kind

from .agent import (
    KIND_CONCURRENT_KERNEL,
    KIND_DRIVER,
    KIND_INTERNAL_LAUNCH_API,
    KIND_MARKER,
    KIND_MEMCPY,
    KIND_MEMSET,
    KIND_RUNTIME,
    KIND_SYNCHRONIZATION,
    api_name,
    read_chunks,
    record_offsets,
)
from .clock import ClockFit, fit_clock
from .layouts import COPY_KINDS, MEMORY_KINDS, SYNC_NAMES, UINT32_MAX, cupti_major, dtypes_for
from .nvtx import empty_ranges, markers_frame, pair_ranges
from .opshapes import empty_shapes, shapes_frame

API_KINDS = (KIND_RUNTIME, KIND_DRIVER, KIND_INTERNAL_LAUNCH_API)
DOMAIN_OF_KIND = {KIND_RUNTIME: "runtime", KIND_DRIVER: "driver",
                  KIND_INTERNAL_LAUNCH_API: "internal"}


@dataclass
class Spool:
    """The chunks of one process's spool file."""

    path: Path
    header: dict
    activity: list[bytes]
    calibrations: list[list[int]]
    names: dict[int, str]
    footer: dict | None  # None: the target did not stop cleanly (crash, kill -9)
    marker_names: dict[int, dict[int, str]] = field(default_factory=dict)  # buffer -> ptr -> str
    op_shapes: list[bytes] = field(default_factory=list)  # opshapes_target.py's chunks
    dropped: int = 0  # records CUPTI said it dropped, summed over the spool's "dropped" chunks


@dataclass
class CuptiTables:
    """Decoded CUPTI activity of one or more processes, times in CLOCK_MONOTONIC ns.

    ``api``: one row per runtime/driver API call (nested records of one call collapsed), with
    the ``call`` table's columns plus ``domain``; ``gpu``: the ``gpu`` table; ``ranges``: the
    NVTX ranges and marks (``nvtx.RANGE_COLUMNS``); ``shapes``: torch operators with their
    input shapes (``opshapes.SHAPE_SCHEMA``; ``zym capture --shapes``).
    """

    api: pl.DataFrame
    gpu: pl.DataFrame
    ranges: pl.DataFrame = field(default_factory=empty_ranges)
    clock: dict[int, ClockFit] = field(default_factory=dict)  # pid -> fit
    stats: dict = field(default_factory=dict)
    shapes: pl.DataFrame = field(default_factory=empty_shapes)
    markers: pl.DataFrame | None = None   # NVTX marker records before pairing (rolling.py)


def read_spool(path: str | Path) -> Spool:
    header, activity, calib, names, footer = {}, [], [], {}, None
    marker_names: dict[int, dict[int, str]] = {}
    op_shapes: list[bytes] = []
    dropped = 0
    for kind, _, payload in read_chunks(str(path)):
        if kind == "activity":
            activity.append(payload)
        elif kind == "dropped":
            dropped += int(payload)
        elif kind == "marker_names":
            doc = json.loads(payload)
            marker_names[int(doc["buffer"])] = {int(k): v for k, v in doc["names"].items()}
        elif kind == "calib":
            calib.append(json.loads(payload))
        elif kind == "header":
            header = json.loads(payload)
        elif kind == "names":
            names.update({int(k): v for k, v in json.loads(payload).items()})
        elif kind == "footer":
            footer = json.loads(payload)
        elif kind == "op_shapes":
            op_shapes.append(payload)
    return Spool(Path(path), header, activity, calib, names, footer, marker_names, op_shapes,
                 dropped)


def decode_buffers(buffers: list[bytes], dtypes: dict[int, np.dtype],
                   origins: dict[int, np.ndarray] | None = None
                   ) -> tuple[dict[int, np.ndarray], int]:
    """Records of every kind in ``dtypes`` found in ``buffers``, one structured array per kind,
    and the number of bytes left undecoded (a record kind with no layout stops a buffer's walk).
    ``origins``: for each kind it names, filled with the buffer index of each record.
    """
    origin_parts: dict[int, list[np.ndarray]] = {k: [] for k in (origins or {})}
    sizes = {k: d.itemsize for k, d in dtypes.items()}
    parts: dict[int, list[np.ndarray]] = {k: [] for k in dtypes}
    undecoded = 0
    for index, buf in enumerate(buffers):
        offsets, kinds, end = record_offsets(buf, sizes)
        undecoded += len(buf) - end
        if not offsets:
            continue
        raw = np.frombuffer(buf, dtype=np.uint8)
        offs, knd = np.asarray(offsets, dtype=np.int64), np.asarray(kinds, dtype=np.int32)
        for k, dt in dtypes.items():
            sel = offs[knd == k]
            if len(sel):
                rows = raw[sel[:, None] + np.arange(dt.itemsize)]  # (n, itemsize) gather
                parts[k].append(rows.view(dt).reshape(-1))
                if k in origin_parts:
                    origin_parts[k].append(np.full(len(sel), index, np.int64))
    out = {k: np.concatenate(v) if v else np.zeros(0, dtype=dtypes[k]) for k, v in parts.items()}
    for k, v in origin_parts.items():
        origins[k] = np.concatenate(v) if v else np.zeros(0, np.int64)
    return out, undecoded


def decode_spool(spool: Spool, clock: ClockFit | None = None) -> CuptiTables:
    """Decode one spool into ``api`` and ``gpu`` frames (see ``CuptiTables``)."""
    version = int(spool.header.get("cupti_api_version", 130001))
    dtypes = dtypes_for(version)
    fit = clock or fit_clock(spool.calibrations)
    origins: dict[int, np.ndarray] = {KIND_MARKER: np.zeros(0, np.int64)}
    records, undecoded = decode_buffers(spool.activity, dtypes, origins)
    records, incomplete = drop_incomplete(records)
    pid = int(spool.header.get("pid", -1))
    api = _api_frame(records, spool.header.get("api_names", {}), fit)
    gpu = _gpu_frame(records, demangle(spool.names), fit, pid)
    markers = _markers(spool, records.get(KIND_MARKER), origins[KIND_MARKER], fit, pid)
    ranges = _ranges(spool, markers, (api, gpu))
    stats = {"pid": pid, "records": int(sum(len(v) for v in records.values())),
             "undecoded_bytes": undecoded, "incomplete": incomplete,
             "cupti_major": cupti_major(version),
             "clean_stop": spool.footer is not None,
             # the footer's total, else (a process that did not stop cleanly) the chunks' sum
             "dropped": int((spool.footer or {}).get("dropped", spool.dropped)),
             "buffers": len(spool.activity),
             "callback_ns": int((spool.footer or {}).get("callback_ns", 0)),
             "facts": {k: v for k, v in (spool.footer or {}).items()
                       if k in ("gpus", "torch_version", "cuda_runtime_version",
                                "cuda_driver_api_version")},
             "nvtx": spool.header.get("nvtx", "off: this agent predates NVTX recording"),
             "nvtx_records": 0 if records.get(KIND_MARKER) is None else len(records[KIND_MARKER]),
             "op_shapes": (spool.footer or {}).get("op_shapes")}
    return CuptiTables(api=api, gpu=gpu, ranges=ranges, clock={pid: fit}, stats=stats,
                       shapes=shapes_frame(spool.op_shapes, pid), markers=markers)


def _markers(spool: Spool, markers: np.ndarray | None, buffer_of: np.ndarray, fit: ClockFit,
             pid: int) -> pl.DataFrame | None:
    """The process's NVTX marker records, timed and named (``markers_frame``), or None."""
    if markers is None or not len(markers):
        return None
    ok = markers["timestamp"] > 0   # 0: CUPTI could not time the marker
    if not ok.any():
        return None
    return markers_frame(markers[ok], buffer_of[ok], spool.marker_names,
                         fit.to_mono(markers["timestamp"][ok]), pid)


def _ranges(spool: Spool, markers: pl.DataFrame | None,
            timed: tuple[pl.DataFrame, ...]) -> pl.DataFrame:
    """The process's NVTX ranges; a range still open at the end is clipped to the end of its
    recording (the footer's stop time, else its last record), one whose start was not
    recorded to the recording's start (the header's)."""
    if markers is None:
        return empty_ranges()
    first_ts, last_ts = int(markers["ts_ns"].min()), int(markers["ts_ns"].max())
    ends = [last_ts] + [int((t["ts_ns"] + t["dur_ns"]).max()) for t in timed
                        if t.height and "ts_ns" in t.columns]
    last = int((spool.footer or {}).get("stopped_mono_ns") or max(ends))
    first = int(spool.header.get("started_mono_ns") or first_ts)
    return pair_ranges(markers, min(first, first_ts), max(last, last_ts))


def drop_incomplete(records: dict[int, np.ndarray]) -> tuple[dict[int, np.ndarray], int]:
    """The records without a start or an end (CUPTI writes 0, ``CUPTI_TIMESTAMP_UNKNOWN``, for
    work it could not time, e.g. kernels still running when the target stopped) or ending
    before they start, removed; also returns how many there were."""
    kept, dropped = {}, 0
    for kind, r in records.items():
        if r.dtype.names and "start" in r.dtype.names and "end" in r.dtype.names:
            ok = (r["start"] > 0) & (r["end"] >= r["start"])
            dropped += int(len(r) - ok.sum())
            r = r[ok]
        kept[kind] = r
    return kept, dropped


def _api_frame(records: dict[int, np.ndarray], names: dict, fit: ClockFit) -> pl.DataFrame:
    frames = []
    for k in API_KINDS:
        r = records.get(k)
        if r is None or not len(r):
            continue
        start = fit.to_mono(r["start"])
        frames.append(pl.DataFrame({
            "pid": r["process_id"].astype(np.int64), "tid": r["thread_id"].astype(np.int64),
            "ts_ns": start, "dur_ns": fit.to_mono(r["end"]) - start,
            "cbid": r["cbid"].astype(np.int32), "correlation_id": r["correlation_id"].astype(np.int64),
            "domain": np.full(len(r), DOMAIN_OF_KIND[k]),
        }))
    if not frames:
        return pl.DataFrame(schema={"pid": pl.Int64, "tid": pl.Int64, "ts_ns": pl.Int64,
                                    "dur_ns": pl.Int64, "name": pl.String, "kind": pl.String,
                                    "correlation_id": pl.Int64, "cbid": pl.Int32,
                                    "domain": pl.String})
    lookup = pl.DataFrame(
        [{"domain": d, "cbid": int(c), "name": api_name(n)} for d, m in names.items()
         for c, n in m.items()] or None,
        schema={"domain": pl.String, "cbid": pl.Int32, "name": pl.String})
    api = pl.concat(frames).join(lookup, on=["domain", "cbid"], how="left").with_columns(
        pl.when(pl.col("domain") == "internal").then(pl.lit("cuLaunchKernel (internal)"))
        .otherwise(pl.col("name").fill_null(pl.format("cbid {} ({})", "cbid", "domain")))
        .alias("name"))
    api = api.with_columns(
        pl.when(pl.col("domain") == "internal").then(pl.lit("launch"))
        .otherwise(api_kind(pl.col("name"))).alias("kind"))
    return collapse_nested(api)


def collapse_nested(api: pl.DataFrame) -> pl.DataFrame:
    """One row per API call: a runtime call and the driver calls inside it share a correlation
    id on one thread; keep the outermost (earliest start, its name) spanning all of them."""
    keyed = api.filter(pl.col("correlation_id") > 0)
    merged = (keyed.sort("ts_ns", pl.col("dur_ns"), descending=[False, True])
              .group_by("pid", "tid", "correlation_id", maintain_order=True)
              .agg(pl.col("ts_ns").first(), (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("end"),
                   pl.col("name").first(), pl.col("kind").first(), pl.col("cbid").first(),
                   pl.col("domain").first())
              .with_columns((pl.col("end") - pl.col("ts_ns")).alias("dur_ns")).drop("end"))
    cols = ["pid", "tid", "ts_ns", "dur_ns", "name", "kind", "correlation_id", "cbid", "domain"]
    return pl.concat([merged.select(cols), api.filter(pl.col("correlation_id") <= 0).select(cols)]
                     ).sort("pid", "tid", "ts_ns")


def demangle(names: dict[int, str]) -> dict[int, str]:
    """C++ kernel names as torch.profiler shows them (``__cxa_demangle``, as Kineto does);
    names that are not mangled, or when libstdc++ is unavailable, stay as they are.

    >>> demangle({1: "_ZN2at6native6kernelEv", 2: "gemm"})
    {1: 'at::native::kernel()', 2: 'gemm'}
    """
    fn = _cxa_demangle()
    if fn is None:
        return dict(names)
    out = {}
    for key, name in names.items():
        out[key] = name
        if name.startswith("_Z"):
            status = ct.c_int(1)
            ptr = fn(name.encode(), None, None, ct.byref(status))
            if ptr and status.value == 0:
                out[key] = ct.string_at(ptr).decode(errors="replace")
                _libc().free(ct.c_void_p(ptr))
    return out


@functools.cache
def _cxa_demangle():
    try:
        fn = ct.CDLL("libstdc++.so.6").__cxa_demangle
    except (OSError, AttributeError):
        return None
    fn.restype = ct.c_void_p
    fn.argtypes = [ct.c_char_p, ct.c_void_p, ct.c_void_p, ct.POINTER(ct.c_int)]
    return fn


@functools.cache
def _libc():
    libc = ct.CDLL(None)
    libc.free.argtypes = [ct.c_void_p]
    return libc


def _gpu_frame(records: dict[int, np.ndarray], names: dict[int, str], fit: ClockFit,
               pid: int) -> pl.DataFrame:
    frames = []
    k = records.get(KIND_CONCURRENT_KERNEL)
    if k is not None and len(k):
        start = fit.to_mono(k["start"])
        ptr = pl.Series("ptr", k["name"].astype(np.int64))
        name_map = pl.DataFrame({"ptr": list(names), "name": list(names.values())},
                                schema={"ptr": pl.Int64, "name": pl.String})
        kn = (pl.DataFrame({"ptr": ptr}).join(name_map, on="ptr", how="left", maintain_order="left")
              .with_columns(pl.col("name").fill_null(pl.format("kernel@{}", pl.col("ptr")))))
        frames.append(pl.DataFrame({
            "device_id": k["device_id"].astype(np.int32), "stream_id": k["stream_id"].astype(np.int64),
            "ts_ns": start, "dur_ns": fit.to_mono(k["end"]) - start, "name": kn["name"],
            "kind": np.full(len(k), "kernel"), "correlation_id": k["correlation_id"].astype(np.int64),
            "grid_x": k["grid_x"], "grid_y": k["grid_y"], "grid_z": k["grid_z"],
            "block_x": k["block_x"], "block_y": k["block_y"], "block_z": k["block_z"],
            "graph_id": k["graph_id"].astype(np.int64), "context_id": k["context_id"].astype(np.int64),
        }))
    for kind_id, kind in ((KIND_MEMCPY, "copy"), (KIND_MEMSET, "memset")):
        m = records.get(kind_id)
        if m is None or not len(m):
            continue
        start = fit.to_mono(m["start"])
        cols = {
            "device_id": m["device_id"].astype(np.int32), "stream_id": m["stream_id"].astype(np.int64),
            "ts_ns": start, "dur_ns": fit.to_mono(m["end"]) - start,
            "kind": np.full(len(m), kind), "correlation_id": m["correlation_id"].astype(np.int64),
            "size_bytes": m["bytes"].astype(np.int64), "graph_id": m["graph_id"].astype(np.int64),
            "context_id": m["context_id"].astype(np.int64),
        }
        if kind == "copy":
            cols |= {"copy_kind": m["copy_kind"].astype(np.int64), "src_mem": m["src_kind"].astype(np.int64),
                     "dst_mem": m["dst_kind"].astype(np.int64)}
        else:
            cols |= {"dst_mem": m["memory_kind"].astype(np.int64)}
        frames.append(pl.DataFrame(cols))
    s = records.get(KIND_SYNCHRONIZATION)
    if s is not None and len(s):
        start = fit.to_mono(s["start"])
        frames.append(pl.DataFrame({
            "stream_id": s["stream_id"].astype(np.int64), "ts_ns": start,
            "dur_ns": fit.to_mono(s["end"]) - start, "kind": np.full(len(s), "sync"),
            "sync_type": s["type"].astype(np.int64),
            "correlation_id": s["correlation_id"].astype(np.int64),
            "context_id": s["context_id"].astype(np.int64),
        }))
    if not frames:
        return pl.DataFrame()
    gpu = pl.concat(frames, how="diagonal_relaxed")
    absent = {"copy_kind": pl.Int64, "src_mem": pl.Int64, "dst_mem": pl.Int64,
              "sync_type": pl.Int64, "size_bytes": pl.Int64, "graph_id": pl.Int64,
              "name": pl.String, "device_id": pl.Int32}
    gpu = gpu.with_columns([pl.lit(None, t).alias(c) for c, t in absent.items()
                            if c not in gpu.columns])
    mem = lambda c: pl.col(c).replace_strict(MEMORY_KINDS, default=None, return_dtype=pl.String)
    copy_kind = pl.col("copy_kind").replace_strict(COPY_KINDS, default=None, return_dtype=pl.String)
    # syncs carry a context, not a device: take the device from the context's other records
    ctx_dev = (gpu.filter(pl.col("device_id").is_not_null())
               .group_by("context_id").agg(pl.col("device_id").first().alias("_dev")))
    gpu = gpu.join(ctx_dev, on="context_id", how="left").with_columns(
        pl.col("device_id").fill_null(pl.col("_dev")))
    title = {"pageable": "Pageable", "pinned": "Pinned", "device": "Device", "array": "Array",
             "managed": "Managed"}
    return gpu.with_columns(
        pl.lit(pid, pl.Int64).alias("pid"),
        copy_kind.alias("copy_kind"), mem("src_mem").alias("src_mem"), mem("dst_mem").alias("dst_mem"),
        pl.when(pl.col("graph_id") > 0).then(pl.col("graph_id")).alias("graph_id"),
        pl.when(pl.col("stream_id") == UINT32_MAX).then(None).otherwise(pl.col("stream_id"))
        .alias("stream_id"),
    ).with_columns(
        pl.when(pl.col("kind") == "copy").then(pl.format(
            "Memcpy {} ({} -> {})", pl.col("copy_kind").fill_null("?"),
            pl.col("src_mem").replace_strict(title, default="?"),
            pl.col("dst_mem").replace_strict(title, default="?")))
        .when(pl.col("kind") == "memset").then(pl.format(
            "Memset ({})", pl.col("dst_mem").replace_strict(title, default="?")))
        .when(pl.col("kind") == "sync").then(
            pl.col("sync_type").replace_strict(SYNC_NAMES, default="Unknown Sync",
                                               return_dtype=pl.String))
        .otherwise(pl.col("name")).alias("name"),
    ).drop("_dev", "context_id", "sync_type").sort("ts_ns")
