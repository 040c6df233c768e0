"""Join eBPF calls (exact Python stacks, no correlation ids) to CUPTI API records (correlation
ids, no stacks), so that every kernel, copy, memset and sync finds the Python line that caused it.

Both sides saw the same calls on the same thread, in the same order, with CLOCK_MONOTONIC times
(CUPTI's converted by the clock fit, ``zym.capture.cupti.clock``). Per thread:

1. **By time** (anchors): a driver probe's call belongs to the runtime record whose
   ``[start, end]`` contains it (the runtime call that made it), or to the record of its own
   layer (libcuda probe: driver record; libcudart probe: runtime record) with the same call kind
   that starts at most ``lead_ns`` after it (the uprobe fires before CUPTI stamps the start:
   1.2-20 us later on the H200), or, within ``eps_ns`` of clock error, to the record that ended
   just before it; in that order of preference. Several eBPF calls may share one record (a
   runtime probe and the driver probe inside it): they get the same correlation id.
2. **Clock residual**: when fewer than ``anchor_share`` of the calls anchor (a bad clock fit),
   the median offset between the k-th call and the k-th record of each (thread, call kind)
   estimates the clock error; a few shifts around it are tried, and the one with most
   kind-consistent anchors is kept and reported.
3. **By sequence** (resynchronized on anchors): an unmatched eBPF call takes the record whose rank
   on its thread is its own rank plus the rank offset of the nearest anchor before (or after)
   it, if that record is unmatched, of the same call kind, and within ``seq_window_ns``. A drop
   on either side changes the offset; the anchors after the drop carry the new one.

Records that no eBPF call claimed become calls without a stack (their GPU work shows as
"unknown stack", never dropped); eBPF calls that found no record keep a null correlation id.
With no eBPF side at all (no root), every CUPTI record is such a call: a valid, stackless capture.

>>> calls = pl.DataFrame({"pid": [1], "tid": [7], "ts_ns": [1_000], "dur_ns": [0],
...                       "name": ["cuLaunchKernel"], "kind": ["launch"], "stack_id": [3]})
>>> api = pl.DataFrame({"pid": [1], "tid": [7], "ts_ns": [900], "dur_ns": [400],
...                     "name": ["cudaLaunchKernel"], "kind": ["launch"], "correlation_id": [42],
...                     "cbid": [211]})
>>> joined, stats = join_calls(calls, api)
>>> joined.select("stack_id", "correlation_id", "dur_ns").row(0)
(3, 42, 400)
"""
from __future__ import annotations

import polars as pl

JOINABLE_KINDS = ("launch", "copy", "memset", "sync")
EPS_NS = 2_000
# A uprobe fires before CUPTI stamps the start of the same driver call: 1.2-20.5 us on the H200
# (gpt_decode_server, 1,488 direct driver launches; docs/capture-gpu.md).
LEAD_NS = 50_000
SEQ_WINDOW_NS = 200_000
ANCHOR_SHARE = 0.9
_KEYS = ["pid", "tid"]


def join_calls(calls: pl.DataFrame | None, api: pl.DataFrame, eps_ns: int = EPS_NS,
               lead_ns: int = LEAD_NS, seq_window_ns: int = SEQ_WINDOW_NS,
               anchor_share: float = ANCHOR_SHARE) -> tuple[pl.DataFrame, dict]:
    """The ``call`` table with correlation ids from ``api``, and join statistics.

    ``calls``: eBPF calls (``call`` table columns; ``correlation_id`` absent or null), or None.
    ``api``: CUPTI API records (``pid, tid, ts_ns, dur_ns, name, kind, correlation_id, cbid``),
    one per call (nested records already collapsed), times in the same clock as ``calls``.
    """
    domain = pl.col("domain") if "domain" in api.columns else pl.lit(None, pl.String)
    api = api.select("pid", "tid", "ts_ns", "dur_ns", "name", "kind", "correlation_id",
                     pl.col("cbid").cast(pl.Int32), domain.alias("domain")
                     ).sort("pid", "tid", "ts_ns").with_row_index("_r")
    if calls is None or calls.height == 0:
        stats = _stats(0, 0, api.height, 0, 0, api.height, 0)
        return _unclaimed_calls(api), stats
    if "correlation_id" not in calls.columns:
        calls = calls.with_columns(pl.lit(None, pl.Int64).alias("correlation_id"))
    calls = calls.with_row_index("_e")
    # the layer a probe sits on: libcudart (cuda*) or libcuda (cu*)
    layer = pl.when(pl.col("name").str.starts_with("cuda")).then(pl.lit("runtime")).otherwise(
        pl.lit("driver")).alias("_layer")
    e = (calls.filter(pl.col("kind").is_in(JOINABLE_KINDS) & pl.col("correlation_id").is_null())
         .select("_e", "pid", "tid", "ts_ns", "kind", layer).sort("pid", "tid", "ts_ns")
         .with_columns(pl.int_range(pl.len()).over(_KEYS).alias("_e_rank")))
    r = api.with_columns(pl.int_range(pl.len()).over(_KEYS).alias("_r_rank"))

    anchors = _match_by_time(e, r, eps_ns, lead_ns)
    shift = 0
    if e.height and anchors.height < anchor_share * e.height:
        # The median pairs each call with its record's start; calls sit 0.7-28 us inside their
        # runtime record, so try a few shifts short of it and keep the most consistent one.
        m = _residual_shift(e, r)
        best = _consistent(anchors, e, r)
        for cand in (m, m - 1_000, m - 2_000, m - 4_000, m + 1_000):
            shifted = _match_by_time(e.with_columns(pl.col("ts_ns") - cand), r, eps_ns, lead_ns)
            score = _consistent(shifted, e, r)
            if score > best:
                anchors, shift, best = shifted, cand, score
    seq = _match_by_sequence(e.with_columns(pl.col("ts_ns") - shift), r, anchors, seq_window_ns)
    pairs = pl.concat([anchors.select("_e", "_r"), seq.select("_e", "_r")])

    claimed = pairs.join(r.select("_r", "correlation_id", "cbid", pl.col("dur_ns").alias("_r_dur"),
                                  pl.col("kind").alias("_r_kind")), on="_r")
    out = (calls.join(claimed.select("_e", pl.col("correlation_id").alias("_corr"),
                                     pl.col("cbid").alias("_cbid"), "_r_dur"), on="_e", how="left")
           .with_columns(
               pl.coalesce("correlation_id", "_corr").alias("correlation_id"),
               (pl.coalesce("cbid", "_cbid") if "cbid" in calls.columns else pl.col("_cbid"))
               .alias("cbid"),
               # entry-only probes record no duration: CUPTI's API record has it
               pl.when(pl.col("dur_ns").fill_null(0) == 0).then(pl.coalesce("_r_dur", "dur_ns"))
               .otherwise("dur_ns").alias("dur_ns"))
           .drop("_e", "_corr", "_cbid", "_r_dur"))
    unclaimed = api.join(pairs.select("_r").unique(), on="_r", how="anti")
    kind_mismatch = (claimed.join(e.select("_e", "kind"), on="_e")
                     .filter(pl.col("kind") != pl.col("_r_kind")).height)
    stats = _stats(calls.height, e.height, api.height, anchors.height, seq.height,
                   unclaimed.height, e.height - pairs.select("_e").n_unique())
    stats |= {"clock_residual_shift_ns": int(shift), "kind_mismatch": kind_mismatch,
              "eps_ns": eps_ns, "lead_ns": lead_ns, "seq_window_ns": seq_window_ns}
    merged = pl.concat([out, _unclaimed_calls(unclaimed)], how="diagonal_relaxed")
    return merged.sort("ts_ns"), stats


def _match_by_time(e: pl.DataFrame, r: pl.DataFrame, eps_ns: int, lead_ns: int) -> pl.DataFrame:
    """(_e, _r) pairs by time: the runtime record before a driver call contains it (the driver
    call inside the runtime call, ``eps_ns`` of clock slack), or the record after the call starts
    within ``lead_ns`` (same layer: the uprobe fires before CUPTI stamps the call's start) with
    the same call kind. A record never contains the uprobe of its own call."""
    if e.height == 0 or r.height == 0:
        return pl.DataFrame(schema={"_e": pl.UInt32, "_r": pl.UInt32})
    domain = pl.col("domain") if "domain" in r.columns else pl.lit(None, pl.String)
    rr = r.select("pid", "tid", "_r", pl.col("ts_ns").alias("_start"),
                  (pl.col("ts_ns") + pl.col("dur_ns")).alias("_end"),
                  pl.col("kind").alias("_r_kind"), domain.alias("_domain")).sort("_start")
    es = e.select("_e", "pid", "tid", "ts_ns", "kind", "_layer").sort("ts_ns")
    same_layer = (pl.col("_domain") == pl.col("_layer")) | (
        (pl.col("_domain") == "internal") & (pl.col("_layer") == "driver"))
    asof = {"left_on": "ts_ns", "right_on": "_start", "by": _KEYS, "check_sortedness": False}
    before = es.join_asof(rr, strategy="backward", **asof).filter(
        pl.col("_r").is_not_null() & (pl.col("_layer") == "driver")
        & (pl.col("_domain").fill_null("runtime") == "runtime")
        & (pl.col("ts_ns") <= pl.col("_end") + eps_ns)
    ).with_columns(pl.max_horizontal(pl.col("ts_ns") - pl.col("_end"), pl.lit(0)).alias("_gap"),
                   # containment first, then a direct call's record, then clock slack
                   pl.when(pl.col("ts_ns") <= pl.col("_end")).then(0).otherwise(2).alias("_prio"))
    after = es.join_asof(rr, strategy="forward", allow_exact_matches=False, **asof).with_columns(
        (pl.col("_start") - pl.col("ts_ns")).alias("_gap"), pl.lit(1).alias("_prio")
    ).filter(pl.col("_r").is_not_null() & (pl.col("kind") == pl.col("_r_kind"))
             & (pl.col("_gap") <= pl.when(same_layer).then(lead_ns).otherwise(eps_ns))
             # a record that starts after a call is that call's own: one call, the nearest
             # (without runtime records, launches made through cudart sit next to the few
             # driver records and would each claim one)
             ).sort("_gap").unique("_r", keep="first")
    cols = ["_e", "_r", "_prio", "_gap"]
    return (pl.concat([before.select(cols), after.select(cols)])
            .sort("_prio", "_gap").unique("_e", keep="first").select("_e", "_r"))


def _consistent(pairs: pl.DataFrame, e: pl.DataFrame, r: pl.DataFrame) -> int:
    """How many pairs join calls and records of the same kind (a match quality score)."""
    return (pairs.join(e.select("_e", "kind"), on="_e")
            .join(r.select("_r", pl.col("kind").alias("_rk")), on="_r")
            .filter(pl.col("kind") == pl.col("_rk")).height)


def _residual_shift(e: pl.DataFrame, r: pl.DataFrame) -> int:
    """Median of (k-th eBPF call - k-th record) start times per thread and call kind: a clock
    error estimate that holds while drops are few (a kind with drops does not move the median
    of the others)."""
    keys = [*_KEYS, "kind"]
    ek = e.with_columns(pl.int_range(pl.len()).over(keys).alias("_k"))
    rk = r.select(*keys, pl.col("ts_ns").alias("_r_ts")).sort("_r_ts").with_columns(
        pl.int_range(pl.len()).over(keys).alias("_k"))
    paired = ek.join(rk, on=[*keys, "_k"])
    if paired.height == 0:
        return 0
    return int((paired["ts_ns"] - paired["_r_ts"]).median())


def _match_by_sequence(e: pl.DataFrame, r: pl.DataFrame, anchors: pl.DataFrame,
                       window_ns: int) -> pl.DataFrame:
    """(_e, _r) pairs for calls step 1 left unmatched, by rank offset from the nearest anchor."""
    if e.height == 0 or r.height == 0:
        return pl.DataFrame(schema={"_e": pl.UInt32, "_r": pl.UInt32})
    offs = (anchors.join(e.select("_e", "_e_rank"), on="_e")
            .join(r.select("_r", "_r_rank"), on="_r")
            .select("_e", (pl.col("_r_rank") - pl.col("_e_rank")).alias("_d")))
    walk = (e.join(offs, on="_e", how="left").sort("pid", "tid", "ts_ns")
            .with_columns(pl.col("_d").forward_fill().over(_KEYS).alias("_d_prev"),
                          pl.col("_d").backward_fill().over(_KEYS).alias("_d_next"))
            .filter(pl.col("_d").is_null()))
    taken = anchors.select("_r")
    free = r.join(taken, on="_r", how="anti").select(
        "pid", "tid", "_r", "_r_rank", pl.col("ts_ns").alias("_r_ts"), pl.col("kind").alias("_r_kind"))
    found = []
    for d in ("_d_prev", "_d_next"):
        cand = (walk.with_columns((pl.col("_e_rank") + pl.col(d).fill_null(0)).alias("_r_rank"))
                .join(free, on=["pid", "tid", "_r_rank"], how="inner")
                .filter((pl.col("kind") == pl.col("_r_kind"))
                        & ((pl.col("ts_ns") - pl.col("_r_ts")).abs() <= window_ns)))
        found.append(cand.select("_e", "_r", pl.lit(len(found)).alias("_pref")))
    got = pl.concat(found).sort("_pref").unique("_e", keep="first")
    return got.sort("_e").unique("_r", keep="first").select("_e", "_r")


def _unclaimed_calls(api: pl.DataFrame) -> pl.DataFrame:
    """CUPTI records no eBPF call claimed, as calls without a stack."""
    return api.select("pid", "tid", "ts_ns", "dur_ns", "name", "kind", "correlation_id", "cbid",
                      pl.lit(None, pl.Int64).alias("stack_id"))


def _stats(calls: int, joinable: int, records: int, by_time: int, by_seq: int,
           unclaimed: int, unmatched: int) -> dict:
    return {"ebpf_calls": calls, "ebpf_joinable": joinable, "cupti_api_calls": records,
            "matched_by_time": by_time, "matched_by_sequence": by_seq,
            "ebpf_unmatched": unmatched, "cupti_unclaimed": unclaimed,
            "ebpf_matched_pct": round(100 * (by_time + by_seq) / joinable, 3) if joinable else 0.0}


def stack_coverage(calls: pl.DataFrame, gpu: pl.DataFrame) -> dict:
    """Share of GPU work (kernels, copies, memsets; syncs apart) whose call has a Python stack.

    >>> c = pl.DataFrame({"pid": [1, 1], "correlation_id": [1, 2], "stack_id": [5, None]})
    >>> g = pl.DataFrame({"pid": [1, 1, 1], "correlation_id": [1, 2, 3], "kind": ["kernel"] * 3,
    ...                   "dur_ns": [60, 30, 10]})
    >>> stack_coverage(c, g)["gpu_time_with_stack_pct"]
    60.0
    """
    stacked = (calls.filter(pl.col("correlation_id").is_not_null() & pl.col("stack_id").is_not_null())
               .select("pid", "correlation_id").unique().with_columns(pl.lit(True).alias("_s")))
    g = gpu.join(stacked, on=["pid", "correlation_id"], how="left").with_columns(
        pl.col("_s").fill_null(False))
    work = g.filter(pl.col("kind") != "sync")
    total_ns = int(work["dur_ns"].sum() or 0)
    with_ns = int(work.filter("_s")["dur_ns"].sum() or 0)
    syncs = g.filter(pl.col("kind") == "sync")
    return {
        "gpu_ops": work.height, "gpu_ops_with_stack": int(work["_s"].sum()),
        "gpu_ns": total_ns, "gpu_ns_with_stack": with_ns,
        "gpu_time_with_stack_pct": round(100 * with_ns / total_ns, 3) if total_ns else 0.0,
        "syncs": syncs.height, "syncs_with_stack": int(syncs["_s"].sum()),
    }


GPU_TO_CALL_KIND = {"kernel": "launch", "copy": "copy", "memset": "memset", "sync": "sync"}


def join_by_order(calls: pl.DataFrame, gpu: pl.DataFrame, eps_ns: int = EPS_NS,
                  lead_ns: int = LEAD_NS) -> tuple[pl.DataFrame, dict]:
    """Correlation ids for eBPF calls that no CUPTI API record claimed, from the GPU records
    no call claimed, by the order CUPTI numbers calls in.

    When CUPTI starts inside a running process (an attach: ``zym run``'s dormant agent), it
    records the GPU work and the driver calls made directly, but not the runtime API: most
    launches then have a kernel record and no API record. CUPTI gives each call a correlation
    id in the order the calls begin, so in each process the calls and the ids run in the same
    order. Per process:

    1. a sync call takes the unclaimed sync record that starts within ``lead_ns`` after it;
    2. the calls that have an id (API-record joins, step 1) cut the process's calls, and the ids,
       into segments (an anchor's id must exceed every id before it in time);
    3. in each segment, per call kind, the k-th free call takes the k-th free id of that kind,
       where the segment holds as many of one as of the other (a record or a call lost inside
       would shift the rest: such a segment is left unjoined and counted), counting from the
       start in the last segment (the last calls' records may be missing) and from the end in
       the one before the first anchor (calls made as CUPTI started may have none); and only
       where the GPU work starts after the call (``eps_ns`` of clock slack);
    4. a sync, or a copy that is not ``...Async``, joined here and without a duration (no API
       record, no return probe) held the CPU until its GPU record ended.

    >>> calls = pl.DataFrame({"pid": [1, 1, 1], "tid": [7, 7, 7], "ts_ns": [100, 200, 300],
    ...     "dur_ns": [0, 0, 0], "kind": ["launch", "launch", "sync"],
    ...     "correlation_id": [None, None, None], "stack_id": [1, 2, 3]})
    >>> gpu = pl.DataFrame({"pid": [1, 1, 1], "kind": ["kernel", "kernel", "sync"],
    ...     "correlation_id": [11, 12, 13], "ts_ns": [150, 260, 310], "dur_ns": [50, 40, 30]})
    >>> out, st = join_by_order(calls.with_columns(name=pl.lit("cuLaunchKernel")), gpu)
    >>> out.sort("ts_ns")["correlation_id"].to_list(), st["matched_by_order"]
    ([11, 12, 13], 3)
    >>> out.sort("ts_ns")["dur_ns"].to_list()  # the sync waited until its record ended
    [0, 0, 40]
    """
    empty = {"matched_by_order": 0, "order_segments_left": 0, "gpu_records_unclaimed": 0}
    if calls is None or calls.height == 0 or gpu.height == 0:
        return calls, empty
    calls = calls.with_row_index("_e")
    claimed = calls.filter(pl.col("correlation_id").is_not_null()).select(
        "pid", pl.col("correlation_id").cast(pl.Int64)).unique()
    g = (gpu.filter(pl.col("kind").is_in(list(GPU_TO_CALL_KIND)))
         .group_by("pid", pl.col("correlation_id").cast(pl.Int64))
         .agg(pl.col("kind").first(), pl.col("ts_ns").min().alias("_g_start"),
              (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("_g_end"))
         .join(claimed, on=["pid", "correlation_id"], how="anti")
         .with_columns(pl.col("kind").replace_strict(GPU_TO_CALL_KIND).alias("kind")))
    free = calls.filter(pl.col("correlation_id").is_null() & pl.col("stack_id").is_not_null()
                        & pl.col("kind").is_in(JOINABLE_KINDS)).select("_e", "pid", "ts_ns", "kind")
    if g.height == 0 or free.height == 0:
        return calls.drop("_e"), empty | {"gpu_records_unclaimed": g.height}
    # 1. syncs by time: a sync record starts as its call waits
    syncs = (free.filter(pl.col("kind") == "sync").sort("ts_ns")
             .join_asof(g.filter(pl.col("kind") == "sync").sort("_g_start")
                        .select("pid", "correlation_id", "_g_start"),
                        left_on="ts_ns", right_on="_g_start", by="pid", strategy="forward",
                        check_sortedness=False)
             .filter(pl.col("_g_start").is_not_null()
                     & (pl.col("_g_start") - pl.col("ts_ns") <= lead_ns))
             .sort("_g_start").unique("correlation_id", keep="first")
             .select("_e", "correlation_id"))
    # 2. segments between anchors (calls with an id), in time and in id order alike
    anchors = (pl.concat([calls.filter(pl.col("correlation_id").is_not_null())
                          .select("pid", "ts_ns", pl.col("correlation_id").cast(pl.Int64)),
                          syncs.join(free, on="_e").select("pid", "ts_ns", "correlation_id")])
               .sort("pid", "ts_ns")
               .filter(pl.col("correlation_id") >= pl.col("correlation_id").cum_max().over("pid"))
               .unique(["pid", "correlation_id"], keep="first").sort("pid", "ts_ns")
               .with_columns(pl.int_range(1, pl.len() + 1).over("pid").alias("_seg")))
    rest_e = free.join(syncs, on="_e", how="anti").sort("ts_ns").join_asof(
        anchors.select("pid", "ts_ns", "_seg").sort("ts_ns"), on="ts_ns", by="pid",
        strategy="backward", check_sortedness=False)
    rest_g = (g.join(syncs.select("correlation_id").with_columns(pl.lit(1).alias("_t")),
                     on="correlation_id", how="anti").sort("correlation_id")
              .join_asof(anchors.select("pid", pl.col("correlation_id").alias("_a_id"), "_seg")
                         .sort("_a_id"), left_on="correlation_id", right_on="_a_id", by="pid",
                         strategy="backward", check_sortedness=False))
    keys = ["pid", "_seg", "kind"]
    rest_e = rest_e.with_columns(pl.col("_seg").fill_null(0)).with_columns(
        pl.int_range(pl.len()).over(keys).alias("_k"), pl.len().over(keys).alias("_n"))
    rest_g = rest_g.with_columns(pl.col("_seg").fill_null(0)).sort("correlation_id").with_columns(
        pl.int_range(pl.len()).over(keys).alias("_k"), pl.len().over(keys).alias("_n"))
    # 3. rank within a segment and kind, where both sides hold as many; the segment after the
    # last anchor counts from its start (records of the last calls may be missing: still
    # running when CUPTI stopped), the one before the first anchor from its end (calls made
    # as CUPTI started may have no record)
    last = pl.col("_seg") == pl.col("_seg").max().over("pid")
    rest_e = rest_e.with_columns(last.alias("_last"), (pl.col("_n") - 1 - pl.col("_k")).alias("_kb"))
    rest_g = rest_g.with_columns((pl.col("_n") - 1 - pl.col("_k")).alias("_kb"))
    gcols = [*keys, "_k", "_kb", "_n", "correlation_id", "_g_start"]
    fwd = (rest_e.join(rest_g.select(gcols).rename({"_n": "_n_g", "_kb": "_kb_g"}),
                       on=[*keys, "_k"])
           .filter((pl.col("_n") == pl.col("_n_g")) | (pl.col("_last") & (pl.col("_seg") > 0))))
    bwd = (rest_e.join(rest_g.select(gcols).rename({"_n": "_n_g", "_k": "_k_g"}),
                       on=[*keys, "_kb"])
           .filter((pl.col("_n") != pl.col("_n_g")) & (pl.col("_seg") == 0)))
    paired = (pl.concat([fwd.select("_e", "correlation_id", "ts_ns", "_g_start"),
                         bwd.select("_e", "correlation_id", "ts_ns", "_g_start")])
              .filter(pl.col("_g_start") >= pl.col("ts_ns") - eps_ns))
    got = pl.concat([syncs, paired.select("_e", "correlation_id")])
    # without an API record a call has no duration (entry probes): a sync, or a copy that is
    # not asynchronous, held the CPU until its GPU record ended
    ends = got.join(g.select("correlation_id", "_g_end"), on="correlation_id")
    uneven = (rest_e.select(*keys, "_n", "_last").unique().join(
        rest_g.select(*keys, pl.col("_n").alias("_n_g")).unique(), on=keys, how="full",
        coalesce=True).filter((pl.col("_n") != pl.col("_n_g").fill_null(-1))
                              & ~pl.col("_last").fill_null(False) & (pl.col("_seg") > 0)).height)
    dtype = calls.schema["correlation_id"]
    dtype = pl.Int64 if dtype == pl.Null else dtype
    blocking = (pl.col("kind") == "sync") | (
        (pl.col("kind") == "copy") & ~pl.col("name").str.contains("Async"))
    out = (calls.join(ends.select("_e", pl.col("correlation_id").alias("_corr"), "_g_end"),
                      on="_e", how="left")
           .with_columns(pl.coalesce(pl.col("correlation_id").cast(pl.Int64), "_corr")
                         .cast(dtype).alias("correlation_id"),
                         pl.when(blocking & pl.col("_g_end").is_not_null()
                                 & (pl.col("dur_ns").fill_null(0) == 0))
                         .then(pl.max_horizontal(pl.col("_g_end") - pl.col("ts_ns"), pl.lit(0)))
                         .otherwise(pl.col("dur_ns")).cast(calls.schema["dur_ns"]).alias("dur_ns"))
           .drop("_e", "_corr", "_g_end"))
    stats = {"matched_by_order": got.height, "order_segments_left": uneven,
             "gpu_records_unclaimed": g.height - got.height}
    return out, stats
