"""The relations rules read: event tables of an analysis, joined with their call site.

A rule names one relation and filters, groups and measures its rows. Every relation is built
once per evaluation, only when a rule reads it, with polars joins (no per-event Python):

* ``calls``: one row per CUDA API call, with the copy or memset it caused (by correlation id), its
  copy direction and memory kinds, the torch op chain above it, its user call site, the
  enclosing Python call it ran in, and the GPU idle time it caused (syncs, blocking copies).
* ``gpu``: one row per GPU operation (kernel, copy, memset) whose launching call was captured,
  with that call's timing and site,
  torch op, input shapes/dtypes and, for matmul-family ops, the FLOPs it performed.
* ``gaps``: one row per GPU idle gap between two busy periods of a device, attributed to what
  the CPU was doing: waiting in a blocking call (``cause = "sync"``) or launching the work
  that ended the gap (``cause = "launch"``), with that call's site.
* ``windows``: the capture cut into equal windows, with each device's busy time in each.

``COLUMNS`` documents each relation's columns; rule validation rejects any other column.
The *site* of a call is the innermost stack node above its CUDA API frame (``site_id``): the
torch op invocation path, or the Python line for direct calls. Calls of one op path (its copy
and the stream sync after it) share a site; so do the kernels of one ``Linear``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from zym.schemas.apis import is_blocking_api

if TYPE_CHECKING:
    from zym.analysis import Analysis

SITE_DOC = {
    "stack_id": "leaf stack node of the event's CPU call",
    "site_id": "call site: the innermost stack node above the CUDA API frame",
    "user_node": "stack node of the innermost user (non-framework) frame",
    "user_function": "innermost user frame: function",
    "user_file": "innermost user frame: file",
    "user_line": "innermost user frame: line (first line of the function for Kineto)",
    "user_module": "nn.Module class the user frame runs in, if any",
    "torch_op": "innermost torch op (aten::...) above the call",
    "op_chain": "every torch op above the call, outermost first, as ';op1;op2;'",
    "py_api": "innermost Python built-in above the call: .tolist, .item, .cpu (Tensor methods "
              "start with a dot), linear...; null when the producer records no built-ins",
}
OP_DOC = {
    "op_id": "torch op invocation id (Kineto External id)",
    "op_shapes": "input shapes of the innermost torch op, JSON",
    "op_dtypes": "input dtypes of the innermost torch op, JSON",
    "dtype": "first input dtype of the innermost torch op (float, c10::Half, c10::BFloat16...)",
}
COLUMNS: dict[str, dict[str, str]] = {
    "calls": {
        "call_idx": "row number of the call in the capture",
        "pid": "process id", "tid": "thread id", "ts_ns": "start", "dur_ns": "duration",
        "end_ns": "end", "correlation_id": "CUDA correlation id",
        "api": "CUDA API name (cudaMemcpyAsync, cudaStreamSynchronize...)",
        "kind": "launch, copy, memset, sync or other",
        "copy_kind": "copy direction: HtoD, DtoH, DtoD (from the API name or its GPU copy)",
        "src_mem": "copy source memory: pageable, pinned, device", "dst_mem": "copy destination",
        "bytes": "bytes copied or set",
        "gpu_ns": "GPU time of the copy or memset the call caused (kernel time: relation gpu)",
        "blocking": "the call blocks the CPU until the GPU catches up (syncs, copies, sync memsets)",
        "blocked_ns": "duration when blocking, else 0",
        "follows_dtoh": "the previous call on the thread was a device-to-host copy",
        "call_instance": "the enclosing call of the user function (span start, or run id)",
        "gpu_idle_ns": "GPU idle time that began while the CPU was blocked in this call",
        **SITE_DOC, **OP_DOC,
    },
    "gpu": {
        "pid": "process id", "tid": "thread of the launching call", "device_id": "device",
        "stream_id": "stream", "ts_ns": "GPU start", "dur_ns": "GPU duration", "end_ns": "GPU end",
        "name": "kernel or activity name", "kind": "kernel, copy, memset or sync",
        "correlation_id": "CUDA correlation id", "bytes": "bytes copied or set",
        "copy_kind": "copy direction", "src_mem": "copy source memory",
        "dst_mem": "copy destination memory", "api": "launching CUDA API",
        "call_ts_ns": "launching call start", "call_dur_ns": "launching call duration",
        "flops": "floating-point operations of a matmul-family op (null when unknown)",
        "dims_aligned8": "every matmul dimension of the op's inputs is a multiple of 8",
        "intensity": "matmul FLOPs per byte of its inputs and output (arithmetic intensity)",
        "launch_wait_ns": "GPU idle gap this op ended, when the GPU was waiting for its launch",
        **SITE_DOC, **OP_DOC,
    },
    "gaps": {
        "pid": "process id", "tid": "thread of the attributed call", "device_id": "device",
        "ts_ns": "gap start (device went idle)", "dur_ns": "gap length", "end_ns": "gap end",
        "cause": "sync (CPU blocked in a call when the GPU went idle) or launch",
        "api": "attributed CUDA call", "correlation_id": "attributed call's correlation id",
        "call_ts_ns": "attributed call start", **SITE_DOC,
    },
    "windows": {
        "device_id": "device", "ts_ns": "window start", "dur_ns": "window length",
        "end_ns": "window end", "busy_ns": "device busy time in the window",
        "busy_frac": "busy_ns / dur_ns", "window_index": "0-based window number",
    },
}
RELATIONS = tuple(COLUMNS)
WINDOWS = 50  # the `windows` relation cuts the capture into this many windows

# Standard measures every rule on a relation gets in its evidence (rules may add their own).
# `cost_ns` is what findings are ranked by unless a rule names another measure.
_SUM = {"count": pl.len()}
STANDARD_MEASURES: dict[str, dict[str, pl.Expr]] = {
    "calls": {"count": pl.len(), "stall_ns": pl.col("blocked_ns").sum(),
              "worst_stall_ns": pl.col("blocked_ns").max(),
              "gpu_idle_ns": pl.col("gpu_idle_ns").sum(), "bytes": pl.col("bytes").sum(),
              "gpu_ns": pl.col("gpu_ns").sum(),
              "instances": pl.col("call_instance").n_unique()},
    "gpu": {"count": pl.len(), "gpu_ns": pl.col("dur_ns").sum(),
            "worst_ns": pl.col("dur_ns").max(), "bytes": pl.col("bytes").sum(),
            "flops": pl.col("flops").sum(),
            "flop_gpu_ns": pl.col("dur_ns").filter(pl.col("flops").is_not_null()).sum(),
            "launch_ns": pl.col("call_dur_ns").sum(),
            "launch_wait_ns": pl.col("launch_wait_ns").sum()},
    "gaps": {"count": pl.len(), "idle_ns": pl.col("dur_ns").sum(),
             "worst_idle_ns": pl.col("dur_ns").max()},
    "windows": {"count": pl.len(), "span_ns": pl.col("dur_ns").sum(),
                "busy_ns": pl.col("busy_ns").sum()},
}
# Occurrence columns (pid, tid, ts_ns, dur_ns, correlation_id) of each relation's rows.
OCCURRENCE: dict[str, list[pl.Expr]] = {
    "calls": [pl.col("pid"), pl.col("tid"), pl.col("ts_ns"), pl.col("dur_ns"),
              pl.col("correlation_id")],
    "gpu": [pl.col("pid"), pl.col("tid"), pl.col("call_ts_ns").alias("ts_ns"),
            pl.col("call_dur_ns").alias("dur_ns"), pl.col("correlation_id")],
    "gaps": [pl.col("pid"), pl.col("tid"), pl.col("ts_ns"), pl.col("dur_ns"),
             pl.col("correlation_id")],
    "windows": [pl.lit(None, pl.Int64).alias("pid"), pl.lit(None, pl.Int64).alias("tid"),
                pl.col("ts_ns"), pl.col("dur_ns"), pl.lit(None, pl.Int64).alias("correlation_id")],
}

_MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
_SHAPES = pl.List(pl.List(pl.Int64))
_ELEMENT_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "half": 2,
                  "bfloat16": 2, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}
# CUPTI correlation ids are 32-bit: (pid, correlation id) packs into one int64 join key.
_KEY = (pl.col("pid").cast(pl.Int64) * (1 << 32) + pl.col("correlation_id")).alias("_key")
# Columns that are a function of the call stack: rules filter them on the (small) site table
# and match events by stack id; they are joined onto events only where a rule groups by them.
SITE_COLUMNS = ("site_id", "user_node", "user_function", "user_file", "user_line",
                "user_module", "torch_op", "op_chain", "py_api")
EVENT_SITE_COLUMNS = ("site_id", "user_node")  # carried on every event row


class Relations:
    """Builds the relations of one analysis as lazy frames, each on first use.

    Rules run as one ``polars.collect_all`` over these frames, so work they share (the joins
    that build a relation) runs once and only the columns some rule reads are computed.
    """

    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self._cache: dict[str, pl.LazyFrame] = {}
        self._eager: dict[str, pl.DataFrame] = {}
        self.total_gpu_ns = int(analysis.data.gpu["dur_ns"].sum() or 0)
        self.window_ns = int(analysis.utilization.get("window_ns") or 0)
        self.sites = site_table(analysis.call_paths.nodes)

    def lazy(self, name: str) -> pl.LazyFrame:
        if name not in self._cache:
            self._cache[name] = getattr(self, f"_build_{name}")()
        return self._cache[name]

    def materialize(self, name: str, columns: set[str]) -> pl.DataFrame:
        """Collect a relation once with (at least) ``columns``: unread columns, and the string
        gathers and joins only they need, are never computed."""
        have = self._eager.get(f"rel:{name}")
        if have is not None and columns <= set(have.columns):
            return have
        if have is not None:
            columns = columns | set(have.columns)
        lf = self.lazy(name)
        keep = [c for c in lf.collect_schema().names() if c in columns]
        self._eager[f"rel:{name}"] = lf.select(keep).collect()
        return self._eager[f"rel:{name}"]

    def frame(self, name: str) -> pl.DataFrame:
        """The materialized relation (``materialize`` first), or all of it."""
        have = self._eager.get(f"rel:{name}")
        return have if have is not None else self.materialize(name, set(COLUMNS[name]))

    def get(self, name: str) -> pl.DataFrame:
        """A relation, collected, with its site columns joined (for inspection and tests)."""
        df = self.lazy(name).collect()
        if "stack_id" in df.columns:
            df = df.join(self.sites.drop(*EVENT_SITE_COLUMNS), on="stack_id", how="left")
        return df

    def site_ids(self, column: str, predicate: pl.Expr) -> pl.Series:
        """Stack ids whose site column satisfies ``predicate`` (evaluated on the site table)."""
        return self.sites.filter(predicate)["stack_id"]

    # -- shared pieces ------------------------------------------------------------------------

    def _calls_base(self) -> pl.LazyFrame:
        """Every call with its row number, API name as ``api``, packed key and blocking flag."""
        data = self.analysis.data
        names = data.calls.select(pl.col("name").unique())
        blocking_names = names.filter(is_blocking_api(pl.col("name")))["name"]
        return (_conform(data.calls, "call").lazy().with_row_index("call_idx")
                .with_columns(pl.col("call_idx").cast(pl.Int64))
                .rename({"name": "api"})
                .with_columns(_KEY, (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
                              (pl.col("api").is_in(blocking_names.implode())
                               | (pl.col("kind") == "copy")).alias("blocking")))

    def _eager_once(self, name: str, build) -> pl.DataFrame:
        if name not in self._eager:
            self._eager[name] = build()
        return self._eager[name]

    def gap_table(self) -> pl.DataFrame:
        """Idle gaps per device between busy periods (leading/trailing idle excluded), each
        with the call the CPU was blocked in when it began (``block_idx``, or null) and the
        packed key of the GPU op that ended it (``next_key``)."""
        return self._eager_once("gaps", self._gap_table)

    def _gap_table(self) -> pl.DataFrame:
        from zym.analysis.timeline import busy_intervals

        gpu = self.analysis.data.gpu
        gaps = (busy_intervals(gpu)
                .with_columns(pl.col("end_ns").shift(1).over("device_id").alias("gap_start"))
                .filter(pl.col("gap_start").is_not_null()
                        & (pl.col("start_ns") > pl.col("gap_start")))
                .select("device_id", pl.col("gap_start").alias("ts_ns"),
                        pl.col("start_ns").alias("end_ns"))
                .with_columns((pl.col("end_ns") - pl.col("ts_ns")).alias("dur_ns"))
                .sort("ts_ns"))
        # The op that ended each gap: one starting at the gap's end on that device.
        nxt = (gpu.lazy().select(pl.col("device_id").fill_null(-1), "ts_ns", _KEY)
               .join(gaps.lazy().select("device_id", pl.col("end_ns").alias("ts_ns")),
                     on=["device_id", "ts_ns"], how="semi")
               .unique(["device_id", "ts_ns"], keep="any")
               .rename({"ts_ns": "end_ns", "_key": "next_key"}))
        # The blocking call running when the GPU went idle (the latest one started before).
        blocking = (self._calls_base().filter("blocking")
                    .select("call_idx", pl.col("ts_ns").alias("b_ts"),
                            pl.col("end_ns").alias("b_end")).sort("b_ts"))
        return (gaps.lazy().join(nxt, on=["device_id", "end_ns"], how="left")
                .sort("ts_ns")
                .join_asof(blocking, left_on="ts_ns", right_on="b_ts", strategy="backward",
                           check_sortedness=False)
                .with_columns(pl.when(pl.col("b_end") >= pl.col("ts_ns")).then("call_idx")
                              .alias("block_idx"))
                .drop("call_idx", "b_ts", "b_end").collect())

    def _matmuls(self) -> pl.DataFrame:
        """FLOPs, arithmetic intensity and 8-alignment per matmul-family call (``_key``)."""
        stacks = self.sites.filter(pl.col("torch_op").is_in(list(_MATMUL_OPS)))["stack_id"]
        calls = (self._calls_base()
                 .filter(pl.col("stack_id").is_in(stacks.implode())
                         & pl.col("op_shapes").is_not_null() & pl.col("correlation_id").is_not_null())
                 .select("_key", "stack_id", "op_shapes", "op_dtypes").collect()
                 .join(self.sites.select("stack_id", "torch_op"), on="stack_id", how="left"))
        return _with_flops(calls).select("_key", "flops", "dims_aligned8", "intensity")

    # -- relations ----------------------------------------------------------------------------

    def _build_calls(self) -> pl.LazyFrame:
        data = self.analysis.data
        gpu = (_conform(data.gpu, "gpu").lazy()
               .filter((pl.col("kind") != "kernel") & pl.col("correlation_id").is_not_null())
               .select(_KEY, pl.col("dur_ns").alias("gpu_ns"),
                       pl.col("copy_kind").alias("g_copy_kind"), "src_mem", "dst_mem",
                       pl.col("size_bytes").alias("g_bytes"))
               .unique("_key", keep="any"))
        is_dtoh = (pl.col("kind") == "copy") & (pl.col("copy_kind") == "DtoH")
        calls = (self._calls_base()
                 .join(gpu, on="_key", how="left")
                 .with_columns(pl.coalesce("copy_kind", "g_copy_kind").alias("copy_kind"),
                               pl.coalesce("g_bytes", "size_bytes", pl.lit(0)).alias("bytes"),
                               pl.col("gpu_ns").fill_null(0),
                               pl.when("blocking").then("dur_ns").otherwise(0).alias("blocked_ns"))
                 .join(self.sites.lazy().select("stack_id", *EVENT_SITE_COLUMNS),
                       on="stack_id", how="left")
                 .sort("pid", "tid", "ts_ns")
                 .with_columns(is_dtoh.shift(1).over("pid", "tid").fill_null(False)
                               .alias("follows_dtoh"), _dtype_expr()))
        calls = self._with_instances(calls)
        idle = (self.gap_table().lazy().filter(pl.col("block_idx").is_not_null())
                .group_by(pl.col("block_idx").alias("call_idx"))
                .agg(pl.col("dur_ns").sum().alias("gpu_idle_ns")))
        return (calls.join(idle, on="call_idx", how="left")
                .with_columns(pl.col("gpu_idle_ns").fill_null(0))
                .drop("_key", "g_copy_kind", "g_bytes", "size_bytes"))

    def _with_instances(self, calls: pl.LazyFrame) -> pl.LazyFrame:
        """``call_instance``: the enclosing call of the user function, per call.

        With spans (Kineto): the start of the user frame's span around the call. Without: a
        run id (negative): consecutive calls of a thread from one user frame. Without spans,
        calls that callees make in between (a model forward inside a decode loop) split runs,
        so per-call counts are then per run.
        """
        same = pl.col("user_node") == pl.col("user_node").shift(1).over("pid", "tid")
        runs = -((~same.fill_null(False)).cast(pl.Int64).cum_sum().over("pid", "tid") + 1)
        spans = self.analysis.data.spans() if hasattr(self.analysis.data, "spans") else None
        if spans is None or spans.height == 0:
            return calls.with_columns(runs.alias("call_instance"))
        users = self.sites["user_node"].drop_nulls().unique()
        sp = (spans.lazy().filter(pl.col("stack_id").is_in(users.implode()))
              .select("pid", "tid", pl.col("stack_id").alias("user_node"),
                      pl.col("ts_ns").alias("inst_ts"),
                      (pl.col("ts_ns") + pl.col("dur_ns")).alias("inst_end")).sort("inst_ts"))
        return (calls.join_asof(sp, left_on="ts_ns", right_on="inst_ts",
                                by=["pid", "tid", "user_node"], strategy="backward",
                                check_sortedness=False)
                .with_columns(pl.coalesce(pl.when(pl.col("inst_end") >= pl.col("ts_ns"))
                                          .then("inst_ts"), runs).alias("call_instance"))
                .drop("inst_ts", "inst_end"))

    def _build_gaps(self) -> pl.LazyFrame:
        gaps = self.gap_table().lazy()
        base = self._calls_base().select("call_idx", "_key", "pid", "tid", "api",
                                         "correlation_id", pl.col("ts_ns").alias("call_ts_ns"),
                                         "stack_id")
        by_key = gaps.filter(pl.col("block_idx").is_null()).select("next_key").rename(
            {"next_key": "_key"})
        launchers = base.join(by_key, on="_key", how="semi").select(
            pl.col("_key").alias("next_key"), pl.col("call_idx").alias("l_idx"))
        return (gaps.join(launchers, on="next_key", how="left")
                .with_columns(pl.when(pl.col("block_idx").is_not_null()).then(pl.lit("sync"))
                              .otherwise(pl.lit("launch")).alias("cause"),
                              pl.coalesce("block_idx", "l_idx").alias("call_idx"))
                .join(base.drop("_key"), on="call_idx", how="left")
                .join(self.sites.lazy().select("stack_id", *EVENT_SITE_COLUMNS),
                      on="stack_id", how="left")
                .drop("l_idx", "block_idx", "next_key", "call_idx"))

    def _build_gpu(self) -> pl.LazyFrame:
        data = self.analysis.data
        launch = self._calls_base().select("_key", "tid", pl.col("ts_ns").alias("call_ts_ns"),
                                           pl.col("dur_ns").alias("call_dur_ns"), "stack_id",
                                           "api", "op_id", "op_shapes", "op_dtypes")
        waits = (self.gap_table().lazy().filter(pl.col("block_idx").is_null())
                 .select(pl.col("next_key").alias("_key"), pl.col("dur_ns").alias("launch_wait_ns"))
                 .unique("_key", keep="any"))
        return (_conform(data.gpu, "gpu").lazy().with_columns(_KEY)
                .join(launch, on="_key", how="inner")
                .join(self.sites.lazy().select("stack_id", *EVENT_SITE_COLUMNS),
                      on="stack_id", how="left")
                .join(waits, on="_key", how="left")
                .join(self._matmuls().lazy(), on="_key", how="left")
                .rename({"size_bytes": "bytes"})
                .with_columns((pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"), _dtype_expr(),
                              pl.col("bytes").fill_null(0), pl.col("launch_wait_ns").fill_null(0))
                .drop("_key"))

    def _build_windows(self) -> pl.LazyFrame:
        from zym.analysis.timeline import busy_intervals

        data = self.analysis.data
        empty = pl.DataFrame(schema={"device_id": pl.Int32, "window_index": pl.Int64,
                                     "ts_ns": pl.Int64, "dur_ns": pl.Int64, "end_ns": pl.Int64,
                                     "busy_ns": pl.Int64, "busy_frac": pl.Float64})
        if data.gpu.height == 0:
            return empty.lazy()
        t0 = min(int(df["ts_ns"].min()) for df in (data.calls, data.gpu) if df.height)
        size = max(self.window_ns // WINDOWS, 1)
        busy = busy_intervals(data.gpu)
        # Split busy intervals at window edges: an interval spans windows [w0, w1].
        iv = busy.with_columns(((pl.col("start_ns") - t0) // size).alias("w0"),
                               ((pl.col("end_ns") - 1 - t0) // size).alias("w1"))
        iv = (iv.with_columns(pl.int_ranges("w0", pl.col("w1") + 1).alias("w")).explode("w")
              .with_columns((pl.col("w") * size + t0).alias("ws"))
              .with_columns((pl.min_horizontal("end_ns", pl.col("ws") + size)
                             - pl.max_horizontal("start_ns", "ws")).alias("busy_ns")))
        per = iv.group_by("device_id", "w").agg(pl.col("busy_ns").sum())
        grid = (busy.select("device_id").unique()
                .join(pl.DataFrame({"w": pl.arange(0, WINDOWS, eager=True).cast(pl.Int64)}),
                      how="cross"))
        return (grid.join(per, on=["device_id", "w"], how="left")
                .select("device_id", pl.col("w").alias("window_index"),
                        (pl.col("w") * size + t0).alias("ts_ns"), pl.lit(size).alias("dur_ns"),
                        ((pl.col("w") + 1) * size + t0).alias("end_ns"),
                        pl.col("busy_ns").fill_null(0))
                .with_columns((pl.col("busy_ns") / pl.col("dur_ns")).alias("busy_frac"))
                .sort("device_id", "window_index").lazy())


def _conform(df: pl.DataFrame, table: str) -> pl.DataFrame:
    """Add the schema columns a producer left out (Kineto calls have no size or stream) as null."""
    from zym.schemas.tables import TABLES, polars_schema

    schema = polars_schema(table)
    missing = [c for c in TABLES[table] if c != "record" and c not in df.columns]
    return df.with_columns([pl.lit(None, schema[c]).alias(c) for c in missing]) if missing else df


def _dtype_expr() -> pl.Expr:
    return pl.col("op_dtypes").str.extract(r'^\[\s*"([^"]*)"', 1).alias("dtype")


def site_table(nodes: pl.DataFrame) -> pl.DataFrame:
    """Per stack node (``stack_id``): ``site_id`` and the site's user frame, torch ops and the
    innermost Python built-in above it.

    One join per depth level, like ``stack_nodes``; the work scales with distinct stack nodes.
    """
    parts = pl.col("name").str.extract_groups(r"^<built-in (?P<how>method|function) (?P<fn>\w+)")
    builtin = pl.when(parts.struct.field("how") == "method").then(
        pl.lit(".") + parts.struct.field("fn")).otherwise(parts.struct.field("fn"))
    base = nodes.select(
        "stack_id", "parent_id", "depth", "kind", "user_node", "op_node", "user_module",
        pl.when(pl.col("kind") == "torch_op").then(pl.col("name")).alias("_op"),
        pl.when(pl.col("kind") == "native").then(builtin).alias("_builtin"))
    chains: list[pl.DataFrame] = []
    prev: pl.DataFrame | None = None
    for depth in range(int(base["depth"].max() or 0) + 1 if base.height else 0):
        level = base.filter(pl.col("depth") == depth)
        if prev is None:
            level = level.with_columns(pl.lit("", pl.String).alias("p_chain"),
                                       pl.lit(None, pl.String).alias("p_api"))
        else:
            level = level.join(prev.select(pl.col("stack_id").alias("parent_id"),
                                           pl.col("op_chain").alias("p_chain"),
                                           pl.col("py_api").alias("p_api")),
                               on="parent_id", how="left")
        level = level.with_columns(
            pl.when(pl.col("_op").is_not_null())
            .then(pl.concat_str(pl.col("p_chain").fill_null(""), pl.lit(";"), "_op"))
            .otherwise(pl.col("p_chain").fill_null("")).alias("op_chain"),
            pl.coalesce("_builtin", "p_api").alias("py_api"))
        chains.append(level.select("stack_id", "op_chain", "py_api"))
        prev = level
    chain = (pl.concat(chains) if chains else
             pl.DataFrame(schema={"stack_id": pl.Int64, "op_chain": pl.String,
                                  "py_api": pl.String}))
    chain = chain.with_columns(pl.when(pl.col("op_chain") == "").then(pl.lit(""))
                               .otherwise(pl.col("op_chain") + ";").alias("op_chain"))
    site_id = (pl.when(pl.col("kind") == "cuda_api").then(pl.coalesce("parent_id", "stack_id"))
               .otherwise("stack_id"))
    frames = nodes.select(pl.col("stack_id").alias("user_node"), pl.col("name").alias("user_function"),
                          pl.col("file").alias("user_file"), pl.col("line").alias("user_line"))
    ops = nodes.select(pl.col("stack_id").alias("op_node"), pl.col("name").alias("torch_op"))
    site = (base.select("stack_id", site_id.alias("site_id"))
            .join(base.select(pl.col("stack_id").alias("site_id"), "user_node", "op_node",
                              "user_module"), on="site_id", how="left")
            .join(chain.rename({"stack_id": "site_id"}), on="site_id", how="left")
            .join(frames, on="user_node", how="left")
            .join(ops, on="op_node", how="left").drop("op_node"))
    return site


def _with_flops(calls: pl.DataFrame) -> pl.DataFrame:
    """FLOPs, intensity and 8-alignment of matmul-family calls from their input shapes.

    ``mm [M,K]x[K,N]``, ``addmm (bias, [M,K], [K,N])``, ``bmm [B,M,K]x[B,K,N]``: 2*M*N*K
    (*B). Intensity: FLOPs per byte of both inputs and the output. Unparsable shapes: null.
    """
    nulls = [pl.lit(None, pl.Int64).alias("flops"), pl.lit(None, pl.Boolean).alias("dims_aligned8"),
             pl.lit(None, pl.Float64).alias("intensity")]
    if calls.height == 0:
        return calls.with_columns(nulls)
    try:
        mm = calls.with_columns(pl.col("op_shapes").str.json_decode(_SHAPES).alias("_s"),
                                _dtype_expr())
    except pl.exceptions.PolarsError:  # shapes of an unexpected form: FLOPs stay unknown
        return calls.with_columns(nulls)
    a_idx = pl.when(pl.col("torch_op").is_in(["aten::addmm", "aten::baddbmm"])).then(1).otherwise(0)
    mm = mm.with_columns(pl.col("_s").list.get(a_idx, null_on_oob=True).alias("_a"),
                         pl.col("_s").list.get(a_idx + 1, null_on_oob=True).alias("_b"))
    batch = pl.when(pl.col("_a").list.len() == 3).then(pl.col("_a").list.get(0, null_on_oob=True)
                                                       ).otherwise(1)
    m_, k_ = (pl.col("_a").list.reverse().list.get(i, null_on_oob=True) for i in (1, 0))
    n_ = pl.col("_b").list.reverse().list.get(0, null_on_oob=True)
    size = pl.col("dtype").replace_strict(_ELEMENT_BYTES, default=None, return_dtype=pl.Int64)
    aligned = pl.col("_s").list.eval(
        pl.element().list.tail(2).list.eval(pl.element() % 8 == 0).list.all()).list.all()
    return (mm.with_columns((2 * batch * m_ * k_ * n_).cast(pl.Int64).alias("flops"),
                            aligned.alias("dims_aligned8"),
                            (batch * (m_ * k_ + k_ * n_ + m_ * n_) * size).cast(pl.Float64)
                            .alias("_mem"))
            .with_columns((pl.col("flops") / pl.col("_mem")).alias("intensity"))
            .drop("_s", "_a", "_b", "_mem"))
