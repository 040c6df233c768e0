"""Finalize the GPU side of a capture: spools -> ``gpu`` table, eBPF calls joined to CUPTI.

``merge_gpu`` is the one function the capture session calls after building its eBPF tables
(frame, stack, call); with no eBPF tables it produces a CUPTI-only capture (calls without
stacks). Both write the join's statistics, the clock fits and CUPTI's drop count into the
capture metadata.

>>> tables = merge_gpu({"frame": f, "stack": s, "call": c}, "trace.parquet.raw/cupti", meta)  # doctest: +SKIP
>>> write_capture("trace.parquet", tables, meta)                                              # doctest: +SKIP
"""
from __future__ import annotations

from pathlib import Path

import polars as pl
from zym.analysis.join import join_by_order, join_calls, stack_coverage
from zym.schemas import CaptureError, CaptureMeta, write_capture
from zym.schemas.tables import TABLES

from .decode import CuptiTables, decode_spool, read_spool
from .layouts import cupti_major
from .nvtx import add_range_layer, empty_ranges
from .opshapes import add_op_layer, attach_shapes, empty_shapes
from .remote import read_gpu_window

SPOOL_GLOB = "cupti-*.spool"


def collect_spools(spool_dir: str | Path) -> tuple[CuptiTables, list[dict]]:
    """Decode every process's spool in ``spool_dir`` into one ``CuptiTables``; also returns
    the spool headers."""
    paths = sorted(Path(spool_dir).glob(SPOOL_GLOB))
    apis, gpus, ranges, clocks, stats, headers, shapes = [], [], [], {}, [], [], []
    for p in paths:
        spool = read_spool(p)
        if not spool.header:
            continue
        t = decode_spool(spool)
        apis.append(t.api)
        ranges.append(t.ranges)
        shapes.append(t.shapes)
        if t.gpu.height:
            gpus.append(t.gpu)
        clocks |= t.clock
        stats.append(t.stats)
        headers.append(spool.header)
    api = pl.concat(apis, how="diagonal_relaxed") if apis else None
    gpu = pl.concat(gpus, how="diagonal_relaxed") if gpus else pl.DataFrame()
    if api is None:
        from .decode import _api_frame

        api = _api_frame({}, {}, None)  # empty, typed
    return CuptiTables(api=api, gpu=gpu, ranges=pl.concat(ranges) if ranges else empty_ranges(),
                       clock=clocks, stats={"spools": stats},
                       shapes=pl.concat(shapes) if shapes else empty_shapes()), headers


def merge_gpu(tables: dict[str, pl.DataFrame] | None, spool_dir: str | Path,
              meta: CaptureMeta) -> dict[str, pl.DataFrame]:
    """The capture's tables with CUPTI's GPU work added and the eBPF calls joined to it.

    ``tables``: the eBPF side's ``frame``, ``stack``, ``call`` tables (None or empty: CUPTI
    only). ``meta`` is updated in place: ``clock_domain``, ``cupti_version``,
    ``dropped["cupti"]``, ``extra["cupti"]`` (clock fits, join statistics, stack coverage).
    """
    cupti, headers = collect_spools(spool_dir)
    if not headers:
        meta.extra["cupti"] = {"spools": 0, "note": f"no CUPTI spool in {spool_dir}: GPU side absent"}
        return dict(tables or {})
    return merge_cupti(tables, cupti, headers, meta, read_gpu_window(spool_dir))


# How close to the end of an attach's CUPTI window a call without its GPU record counts as
# cut by the switch-off (a launch's record is decided within microseconds of its entry; a
# thread descheduled meanwhile can take milliseconds).
OFF_EDGE_NS = 20_000_000
# A thread held up longer than that (descheduled, waiting for the interpreter) between a
# launch's entry and the moment its GPU record is decided: the switch-off is one moment, so on
# each thread the calls it left without GPU records come last. Those CUPTI recorded (an API
# record) after the thread's last call with GPU work, this close to the end, count as cut too.
OFF_TAIL_NS = 1_000_000_000
GPU_CALLS = ("launch", "copy", "memset")   # call kinds that make a GPU record


def merge_cupti(tables: dict[str, pl.DataFrame] | None, cupti: CuptiTables, headers: list[dict],
                meta: CaptureMeta, window: tuple[int, int] | None = None
                ) -> dict[str, pl.DataFrame]:
    """``merge_gpu`` on records decoded already (``headers``: their spools' headers), e.g. one
    interval's share of a continuous capture (``capture/cupti/rolling.py``). ``window``:
    CLOCK_MONOTONIC bounds within which CUPTI recorded (an attach), else None."""
    tables = dict(tables or {})
    api, gpu = cupti.api, cupti.gpu
    recorded = tables["call"].height if tables.get("call") is not None else 0
    if window is not None and tables.get("call") is not None:
        # an attach: CUPTI ran inside the eBPF session; calls outside it have no GPU records
        tables["call"] = tables["call"].filter(pl.col("ts_ns").is_between(*window))
    probed = tables.get("call")
    if window is not None and probed is not None:   # eBPF's calls (the join adds CUPTI's own)
        probed = probed.with_columns(pl.lit(True).alias("_probed"))
    calls, join_stats = join_calls(probed, api)
    if window is not None and calls is not None:
        gpu_before = gpu.height
        calls, gpu, kept = _cut_to_window(calls, api, gpu, window)
        meta.extra["gpu_window"] = {"from_mono_ns": window[0], "to_mono_ns": window[1],
                                    "calls_left_out": recorded - kept,
                                    "gpu_ops_left_out": gpu_before - gpu.height}
    gpu = gpu.select([c for c in TABLES["gpu"] if c != "record" and c in gpu.columns])
    if tables.get("call") is not None and gpu.height:   # GPU work no API record accounts for
        calls, order_stats = join_by_order(calls, gpu)
        join_stats |= order_stats
        matched = (join_stats.get("matched_by_time", 0) + join_stats.get("matched_by_sequence", 0)
                   + order_stats["matched_by_order"])
        joinable = join_stats.get("ebpf_joinable", 0)
        join_stats["ebpf_unmatched"] = max(joinable - matched, 0)
        join_stats["ebpf_matched_pct"] = round(100 * min(matched, joinable) / joinable, 3) \
            if joinable else 0.0
    coverage = stack_coverage(calls, gpu) if gpu.height else {}   # Python stacks only
    calls, shape_stats = attach_shapes(calls, cupti.shapes)
    if calls is not None:
        frames, stacks, calls, layered_paths = add_op_layer(tables.get("frame"),
                                                            tables.get("stack"), calls)
        if layered_paths:
            tables["frame"], tables["stack"] = frames, stacks
            shape_stats["paths_given_the_operator"] = layered_paths
    recording = {str(st["pid"]): st["op_shapes"] for st in cupti.stats["spools"]
                 if st.get("op_shapes")}
    if recording or shape_stats:
        meta.extra["op_shapes"] = {"recording": recording, **shape_stats}
    layered, nvtx_stats = add_range_layer(
        {"frame": tables.get("frame"), "stack": tables.get("stack"), "call": calls}, cupti.ranges)
    if cupti.ranges.height:
        tables |= {t: layered[t] for t in ("frame", "stack", "range")}
        calls = layered["call"]
    meta.extra["nvtx"] = {
        "recording": {str(st["pid"]): st.get("nvtx") for st in cupti.stats["spools"]},
        "marker_records": int(sum(st.get("nvtx_records", 0) for st in cupti.stats["spools"])),
        **nvtx_stats}
    tables["call"] = calls.select([c for c in TABLES["call"] if c != "record" and c in calls.columns])
    tables["gpu"] = gpu
    facts: dict = {}
    for st in cupti.stats["spools"]:
        facts |= st.get("facts", {})
    if not meta.gpus and facts.get("gpus"):
        meta.gpus = facts["gpus"]
    if not meta.driver_version and facts.get("cuda_driver_api_version"):
        v = int(facts["cuda_driver_api_version"])
        meta.driver_version = f"CUDA driver API {v // 1000}.{v % 1000 // 10}"
    meta.runtime_version = meta.runtime_version or facts.get("cuda_runtime_version", "")
    meta.torch_version = meta.torch_version or facts.get("torch_version", "")
    versions = {h.get("cupti_api_version") for h in headers}
    meta.clock_domain = "CLOCK_MONOTONIC"
    meta.cupti_version = ", ".join(f"{v} (CUPTI {cupti_major(v)}.x)" for v in sorted(versions) if v)
    meta.dropped["cupti"] = int(sum(s["dropped"] for s in cupti.stats["spools"]))
    undecoded = int(sum(s["undecoded_bytes"] for s in cupti.stats["spools"]))
    incomplete = int(sum(s.get("incomplete", 0) for s in cupti.stats["spools"]))
    if incomplete:  # records CUPTI could not time (no start or end): left out, counted
        meta.dropped["cupti_incomplete"] = incomplete
    if undecoded:  # a record layout that does not fit this CUPTI: say so, never guess
        meta.dropped["cupti_undecoded_bytes"] = undecoded
    cost = meta.extra.get("capture_cost")
    if isinstance(cost, dict):     # the CUPTI agent's own work in the target (buffer callbacks)
        cost["cupti_buffer_ns"] = int(sum(s.get("callback_ns", 0) for s in cupti.stats["spools"]))
    meta.extra["cupti"] = {
        "spools": cupti.stats["spools"],
        "clock_fit": {str(pid): fit.to_meta() for pid, fit in cupti.clock.items()},
        "join": join_stats, "stack_coverage": coverage,
        "enabled_apis": {d: sorted({n for h in headers for n in h.get("api_names", {}).get(d, {}).values()})
                         for d in ("runtime", "driver")},
    }
    return tables


def _cut_to_window(calls: pl.DataFrame, api: pl.DataFrame, gpu: pl.DataFrame,
                   window: tuple[int, int]) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """An attach's calls (joined to CUPTI's API records) and GPU records, cut to CUPTI's
    recording ``window``. A call still running when CUPTI was switched off may have lost its GPU
    records (they are decided inside the call): the window keeps the calls that ended inside
    it, and those that made no GPU record near its end count as cut by the switch-off (left
    out and counted, not calls that caused no GPU work). The GPU records of the calls left
    out go with them, and so do those of API records outside the window that no probed call
    kept joined (``_probed``: a call entered just after the switch-on, inside a runtime call
    that began before it, keeps its GPU work). Returns the calls, the GPU records and how many
    probed calls were kept."""
    ts = pl.col("ts_ns")
    inside = (ts + pl.col("dur_ns").fill_null(0)) <= window[1]
    has_ids = gpu.height and "correlation_id" in gpu.columns
    if has_ids and "kind" in calls.columns:
        worked = (gpu.select(pl.col("pid").cast(pl.Int64).alias("_p"),
                             pl.col("correlation_id").cast(pl.Int64).alias("_c"))
                  .drop_nulls().unique().with_columns(pl.lit(True).alias("_worked")))
        calls = (calls.with_columns(pl.col("pid").cast(pl.Int64).alias("_p"),
                                    pl.col("correlation_id").cast(pl.Int64).alias("_c"))
                 .join(worked, on=["_p", "_c"], how="left", maintain_order="left")
                 .drop("_p", "_c"))
        thread = ["pid", "tid"] if "tid" in calls.columns else ["pid"]
        lacking = pl.col("kind").is_in(GPU_CALLS) & pl.col("_worked").is_null()
        last_worked = pl.when(pl.col("_worked").is_not_null()).then(ts).max().over(thread)
        # Only calls CUPTI recorded (an API record, no GPU record): a call with neither may
        # still get its GPU work by order (``join_by_order``: an attach records no runtime
        # API records), and is judged by the 20 ms edge alone.
        trailing = (pl.col("correlation_id").is_not_null()
                    & (last_worked.is_null() | (ts > last_worked))
                    & (ts > window[1] - OFF_TAIL_NS))
        inside = inside & ~(lacking & ((ts > window[1] - OFF_EDGE_NS) | trailing))
    ids = [pl.col("pid").cast(pl.Int64), pl.col("correlation_id").cast(pl.Int64)]
    keys = ["pid", "correlation_id"]
    cut = calls.filter(~inside).select(ids)
    calls = calls.filter(inside)
    probed = calls.filter(pl.col("_probed").fill_null(False)) if "_probed" in calls.columns \
        else calls.head(0)
    calls = calls.drop("_worked", "_probed", strict=False)
    if has_ids:
        kept = probed.select(ids).drop_nulls()
        outside = (api.filter(~ts.is_between(*window)).select(ids)
                   .join(kept, on=keys, how="anti"))
        gone = pl.concat([cut, outside]).drop_nulls().select(
            pl.col("pid").cast(gpu["pid"].dtype),
            pl.col("correlation_id").cast(gpu["correlation_id"].dtype)).unique()
        gpu = gpu.join(gone, on=keys, how="anti")
    return calls, gpu, probed.height


def finalize_capture(spool_dir: str | Path, output: str | Path,
                     tables: dict[str, pl.DataFrame] | None = None,
                     meta: CaptureMeta | None = None) -> tuple[Path, CaptureMeta]:
    """Write ``output`` from the spools (and the eBPF side's tables when given)."""
    meta = meta or CaptureMeta(producer="zym capture (CUPTI only)")
    merged = merge_gpu(tables, spool_dir, meta)
    if "gpu" not in merged:
        raise CaptureError(f"{spool_dir}: no CUPTI spool file ({SPOOL_GLOB}): did the target "
                           "start the collector? (zym prints why when it cannot)")
    return write_capture(output, merged, meta), meta
