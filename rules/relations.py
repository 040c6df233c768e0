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
* ``paths``: one row per call path of the analysis (``zym analyze``'s rankings): calls,
  blocked CPU time, GPU time, kernels, copies and bytes per direction.
* ``windows``: the capture cut into equal windows, with each device's busy time in each.

``COLUMNS`` documents each relation's columns; rule validation rejects any other column.
The *site* of a call is the innermost stack node above its CUDA API frame (``site_id``): the
torch op invocation path, or the Python line for direct calls. Calls of one op path (its copy
and the stream sync after it) share a site; so do the kernels of one ``Linear``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl
from zym.analysis.correlate import match_rows
from zym.analysis.timeline import busy_intervals
from zym.schemas.apis import is_blocking_api

from .derive import MATMUL_OPS, site_table, with_flops

if TYPE_CHECKING:
    from zym.analysis import Analysis

SITE_DOC = {
    "stack_id": "leaf stack node of the event's CPU call",
    "code_site": "the code a finding points at: one id per user line + torch op chain + "
                 "built-in, whatever the callers above (the default grouping)",
    "site_id": "call path site: the innermost stack node above the CUDA API frame",
    "user_node": "stack node of the innermost user (non-framework) frame",
    "user_function": "innermost user frame: function",
    "user_file": "innermost user frame: file",
    "user_line": "innermost user frame: line (first line of the function for Kineto)",
    "user_module": "nn.Module class the user frame runs in, if any",
    "torch_op": "innermost torch op (aten::...) above the call",
    "op_chain": "every torch op above the call, outermost first, as ';op1;op2;'",
    "frames": "every Python frame above the call, outermost first, as ';file:function;...;' "
              "(match a caller anywhere in the stack with a regex)",
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
        "follows_copy": "the previous call on the thread was a copy (any direction)",
        "prev_copy_bytes": "bytes of the previous call on the thread when it was a copy",
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
        "call_idx": "row of the launching call (joins the calls relation)",
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
        "call_ts_ns": "attributed call start", "op_id": "attributed call's torch op id",
        "in_op_ns": "launch gaps: part of the gap the CPU spent inside the torch op whose launch "
                    "ended it (from its span; null without spans)",
        **SITE_DOC,
    },
    "paths": {
        "path_id": "call path (its leaf stack node, as in zym analyze)",
        "calls": "CUDA calls on the path", "launches": "kernel launches", "syncs": "sync calls",
        "cpu_call_ns": "CPU time in the path's CUDA calls",
        "cpu_blocked_ns": "CPU time blocked in syncs and copies",
        "max_blocked_ns": "longest single blocking call", "api": "first CUDA API of the path",
        "gpu_ns": "GPU time caused", "kernels": "kernels", "copies": "copies", "memsets": "memsets",
        "bytes_htod": "bytes copied host to device", "bytes_dtoh": "bytes copied device to host",
        "bytes_dtod": "bytes copied device to device", "top_gpu_op": "costliest GPU op name",
        **SITE_DOC,
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
    "paths": {"count": pl.len(), "gpu_ns": pl.col("gpu_ns").sum(),
              "stall_ns": pl.col("cpu_blocked_ns").sum(),
              "worst_stall_ns": pl.col("max_blocked_ns").max(),
              "calls": pl.col("calls").sum(), "kernels": pl.col("kernels").sum()},
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
    # A path is not an event: its findings list none (the calls relation has them).
    "paths": [pl.lit(None, pl.Int64).alias(c) for c in ("pid", "tid", "ts_ns", "dur_ns",
                                                          "correlation_id")],
    "windows": [pl.lit(None, pl.Int64).alias("pid"), pl.lit(None, pl.Int64).alias("tid"),
                pl.col("ts_ns"), pl.col("dur_ns"), pl.lit(None, pl.Int64).alias("correlation_id")],
}

# Columns that are a function of the call stack: rules filter them on the (small) site table
# and match events by stack id; they are joined onto events only where a rule groups by them.
SITE_COLUMNS = ("code_site", "site_id", "user_node", "user_function", "user_file", "user_line",
                "user_module", "torch_op", "op_chain", "py_api", "frames")
EVENT_SITE_COLUMNS = ("code_site", "site_id", "user_node")  # carried on every event row


class Relations:
    """Builds the relations of one analysis, each once and only with the columns rules read.

    Event-level work is vectorized: a call's GPU work, a GPU op's launching call and a stack's
    site are found by dense gathers (correlation ids and stack ids are small integers), with a
    hash join as the fallback, never by a Python loop over events.
    """

    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self._eager: dict[str, pl.DataFrame] = {}
        self.total_gpu_ns = int(analysis.data.gpu["dur_ns"].sum() or 0)
        self.window_ns = int(analysis.utilization.get("window_ns") or 0)
        self.sites = site_table(analysis.call_paths.nodes)

    def materialize(self, name: str, columns: set[str], wheres: list[dict] | None = None
                    ) -> pl.DataFrame:
        """The relation with (at least) ``columns``, built once per column set.

        ``wheres``: the ``where`` of every rule that will read it; rows none of them can keep
        are dropped before the per-row joins and gathers (``compile.relaxed_where``).
        """
        import json

        key = f"rel:{name}:{json.dumps(wheres, sort_keys=True, default=str)}"
        have = self._eager.get(key)
        if have is not None and columns <= set(have.columns):
            return have
        wanted = (columns | set(have.columns)) if have is not None else set(columns)
        wanted &= set(COLUMNS[name]) | {"call_idx"}
        self._eager[key] = getattr(self, f"_build_{name}")(wanted, wheres)
        return self._eager[key]

    def _keep(self, df: pl.DataFrame, wheres: list[dict] | None) -> pl.DataFrame:
        """Rows of ``df`` that at least one of ``wheres`` may keep."""
        from .compile import relaxed_where

        if not wheres:
            return df
        sites = self.sites if "stack_id" in df.columns else None
        parts = [relaxed_where(w, set(df.columns), sites, df) for w in wheres]
        if any(p is None for p in parts):
            return df
        return df.filter(pl.any_horizontal(parts))

    def get(self, name: str) -> pl.DataFrame:
        """A whole relation with its site columns joined (for inspection and tests)."""
        df = self.materialize(name, set(COLUMNS[name]))
        if "stack_id" in df.columns:
            df = df.join(self.sites.drop(*EVENT_SITE_COLUMNS), on="stack_id", how="left")
        return df

    def _once(self, name: str, build) -> pl.DataFrame:
        if name not in self._eager:
            self._eager[name] = build()
        return self._eager[name]

    # -- shared pieces ------------------------------------------------------------------------

    def calls_table(self) -> pl.DataFrame:
        """The call table (schema-conformed, narrow) in time order, with ``call_idx`` (its row
        number here), ``_orig`` (its row in the capture), ``_thread``, ``api``, ``end_ns`` and
        ``blocking``."""
        return self._once("calls", self._calls_table)

    def _calls_table(self) -> pl.DataFrame:
        raw = _conform(self.analysis.data.calls, "call")
        blocking_names = (raw.select(pl.col("name").unique())
                          .filter(is_blocking_api(pl.col("name")))["name"])
        # Narrow: long per-call text (shapes, dtypes) stays in the capture's table and is
        # gathered through ``_orig`` only for rows a rule keeps. API names are few: as a
        # categorical, sorting and gathering moves an integer, not text.
        calls = raw.select("pid", "tid", "ts_ns", "dur_ns", pl.col("name").cast(pl.Categorical)
                           .alias("api"), "kind", "correlation_id", "stack_id", "size_bytes",
                           "copy_kind", "op_id").with_row_index("_orig")
        if not calls["ts_ns"].is_sorted():
            calls = calls.sort("ts_ns")
        # One int64 per thread: per-thread sequences (the previous call, runs) are windows
        # over it, or plain shifts when the capture has one thread.
        calls = calls.with_columns(_thread_key())
        self._eager["_many_threads"] = bool(calls.height) and (
            calls["_thread"].min() != calls["_thread"].max())
        return (calls.with_row_index("call_idx").with_columns(
                    pl.col("call_idx").cast(pl.Int64), pl.col("_orig").cast(pl.Int64),
                    (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
                    (pl.col("api").cast(pl.String).is_in(blocking_names.implode())
                     | (pl.col("kind") == "copy")).alias("blocking")))

    def _per_thread(self, expr: pl.Expr) -> pl.Expr:
        """``expr`` evaluated per thread (calls are in time order)."""
        self.calls_table()
        return expr.over("_thread") if self._eager.get("_many_threads") else expr

    def gpu_table(self) -> pl.DataFrame:
        """The GPU table (schema-conformed) with ``call_idx``: its launching call's row in
        ``calls_table`` (null when that call was not captured)."""
        return self._once("gpu", self._gpu_table)

    def _gpu_table(self) -> pl.DataFrame:
        gpu = _conform(self.analysis.data.gpu, "gpu")
        calls = self.calls_table()
        rows = match_rows(calls["pid"], calls["correlation_id"], gpu["pid"], gpu["correlation_id"])
        return gpu.with_columns(rows.alias("call_idx"), pl.col("device_id").fill_null(-1))

    def busy(self) -> pl.DataFrame:
        """GPU busy periods per device: ``device_id, start_ns, end_ns, first_row`` (the GPU
        op, a row of ``gpu_table``, that opened the period): ``analysis.timeline``'s."""
        return self._once("busy", self._busy)

    def _busy(self) -> pl.DataFrame:
        return busy_intervals(self.gpu_table())

    def site_of(self, stack: pl.Series, columns: tuple[str, ...] = EVENT_SITE_COLUMNS
                ) -> list[pl.Series]:
        """Site columns for each stack id of ``stack`` (a gather when ids are dense)."""
        sites = self.sites
        top = int(sites["stack_id"].max()) if sites.height else -1
        if sites.height and 0 <= int(sites["stack_id"].min()) and top < 4 * sites.height + 1024:
            pos = pl.repeat(None, top + 1, dtype=pl.Int64, eager=True).scatter(
                sites["stack_id"], pl.int_range(sites.height, eager=True).cast(pl.Int64))
            idx = pos.gather(stack.cast(pl.Int64).clip(0, top))
            idx = pl.select(pl.when(stack.is_between(0, top)).then(idx)).to_series()
            return [sites[c].gather(idx).alias(c) for c in columns]
        joined = stack.to_frame("stack_id").join(sites.select("stack_id", *columns),
                                                 on="stack_id", how="left", maintain_order="left")
        return [joined[c] for c in columns]

    def gap_table(self) -> pl.DataFrame:
        """Idle gaps per device between busy periods (leading/trailing idle excluded), each
        with ``block_idx``: the call the CPU was blocked in when it began (or null), and
        ``next_row``: the GPU op (row of ``gpu_table``) that ended it."""
        return self._once("gaps", self._gap_table)

    def _gap_table(self) -> pl.DataFrame:
        # Each gap ends where a busy period opens; the op that opened it ended the gap.
        gaps = (self.busy()
                .with_columns(pl.col("end_ns").shift(1).over("device_id").alias("gap_start"))
                .filter(pl.col("gap_start").is_not_null()
                        & (pl.col("start_ns") > pl.col("gap_start")))
                .select("device_id", pl.col("gap_start").alias("ts_ns"),
                        pl.col("start_ns").alias("end_ns"), pl.col("first_row").alias("next_row"))
                .with_columns((pl.col("end_ns") - pl.col("ts_ns")).alias("dur_ns")))
        # The blocking call running when the GPU went idle (the latest one started before).
        blocking = (self.calls_table().filter("blocking")
                    .select("call_idx", pl.col("ts_ns").alias("b_ts"), pl.col("end_ns").alias("b_end")))
        return (gaps.sort("ts_ns")
                .join_asof(blocking, left_on="ts_ns", right_on="b_ts", strategy="backward",
                           check_sortedness=False)
                .with_columns(pl.when(pl.col("b_end") >= pl.col("ts_ns")).then("call_idx")
                              .alias("block_idx"))
                .drop("call_idx", "b_ts", "b_end"))

    def _matmuls(self) -> pl.DataFrame:
        """FLOPs, arithmetic intensity and 8-alignment per matmul-family call (``call_idx``)."""
        stacks = self.sites.filter(pl.col("torch_op").is_in(list(MATMUL_OPS)))["stack_id"]
        raw = _conform(self.analysis.data.calls, "call")
        calls = self.calls_table().filter(pl.col("stack_id").is_in(stacks.implode()))
        calls = (calls.select("call_idx", "stack_id", *[raw[c].gather(calls["_orig"])
                                                        for c in ("op_shapes", "op_dtypes")])
                 .filter(pl.col("op_shapes").is_not_null())
                 .join(self.sites.select("stack_id", "torch_op"), on="stack_id", how="left"))
        return with_flops(calls).select("call_idx", "flops", "dims_aligned8", "intensity")

    # -- relations ----------------------------------------------------------------------------

    def _build_calls(self, want: set[str], wheres: list[dict] | None = None) -> pl.DataFrame:
        calls = self.calls_table()
        n = calls.height
        cols = [c for c in calls.columns if c in want or c in ("call_idx", "stack_id", "kind",
                                                               "copy_kind", "size_bytes")]
        df = calls.select(cols)
        seq = {"follows_dtoh", "follows_copy", "prev_copy_bytes"}
        gpu_cols = {"copy_kind", "src_mem", "dst_mem", "bytes", "gpu_ns"} | seq
        pos = None
        if want & gpu_cols:  # the copy or memset each call caused, by a dense gather
            gpu = (self.gpu_table().lazy()
                   .select("kind", "call_idx", "dur_ns", "copy_kind", "src_mem", "dst_mem",
                           "size_bytes")
                   .filter((pl.col("kind") != "kernel") & pl.col("call_idx").is_not_null())
                   .collect())
            # One copy or memset per call: where a call has several, one of them is kept.
            pos = pl.repeat(None, n, dtype=pl.Int64, eager=True).scatter(
                gpu["call_idx"], pl.int_range(gpu.height, eager=True).cast(pl.Int64))
            direction = gpu["copy_kind"].cast(pl.Categorical).gather(pos)
            df = df.with_columns(pl.coalesce(pl.col("copy_kind").cast(pl.Categorical),
                                             direction).alias("copy_kind"))
        # Sequence columns need every call of the thread, before any row is dropped.
        if want & seq:  # about the previous call of the same thread: one window, then gathers
            prev = (calls.select(self._per_thread(pl.col("call_idx").shift(1)).alias("p"))
                    ["p"])
            is_copy = (df["kind"] == "copy").gather(prev).fill_null(False)
            dtoh = is_copy & (df["copy_kind"] == "DtoH").gather(prev).fill_null(False)
            nbytes = pl.select(pl.coalesce(gpu["size_bytes"].gather(pos),
                                           df["size_bytes"])).to_series().gather(prev)
            df = df.with_columns(dtoh.alias("follows_dtoh"), is_copy.alias("follows_copy"),
                                 pl.when(is_copy).then(nbytes).alias("prev_copy_bytes"))
        if "call_instance" in want:
            user_node = self.site_of(calls["stack_id"], ("user_node",))[0]
            df = df.with_columns(self._instances(calls, user_node))
        df = self._keep(df, wheres)
        idx = df["call_idx"]
        df = df.with_columns(*self.site_of(df["stack_id"]))
        if pos is not None:
            at = pos.gather(idx)
            df = df.with_columns(
                gpu["src_mem"].cast(pl.Categorical).gather(at).alias("src_mem"),
                gpu["dst_mem"].cast(pl.Categorical).gather(at).alias("dst_mem"),
                pl.coalesce(gpu["size_bytes"].gather(at), pl.col("size_bytes"), pl.lit(0))
                .alias("bytes"),
                gpu["dur_ns"].gather(at).fill_null(0).alias("gpu_ns"))
        if "blocked_ns" in want:
            df = df.with_columns(pl.when(calls["blocking"].gather(idx))
                                 .then(calls["dur_ns"].gather(idx)).otherwise(0)
                                 .alias("blocked_ns"))
        if "gpu_idle_ns" in want:
            idle = (self.gap_table().filter(pl.col("block_idx").is_not_null())
                    .group_by("block_idx").agg(pl.col("dur_ns").sum()))
            per_call = pl.repeat(0, n, dtype=pl.Int64, eager=True).scatter(
                idle["block_idx"], idle["dur_ns"])
            df = df.with_columns(per_call.gather(idx).alias("gpu_idle_ns"))
        return df.select([c for c in df.columns if c in want or c in ("call_idx",)])

    def _instances(self, calls: pl.DataFrame, user_node: pl.Series) -> pl.Series:
        """``call_instance``: the enclosing call of the user function, per call.

        With spans (Kineto): the start of the user frame's span around the call. Without: a
        run id (negative): consecutive calls of a thread from one user frame. Without spans,
        calls that callees make in between (a model forward inside a decode loop) split runs,
        so per-call counts are then per run.
        """
        frame = calls.select("pid", "tid", "ts_ns", "_thread").with_columns(
            user_node.alias("user_node"))
        same = self._per_thread(pl.col("user_node") == pl.col("user_node").shift(1))
        runs = -(self._per_thread((~same.fill_null(False)).cast(pl.Int64).cum_sum()) + 1)
        spans = self.analysis.data.spans() if hasattr(self.analysis.data, "spans") else None
        if spans is None or spans.height == 0:
            return frame.select(runs.alias("call_instance")).to_series()
        users = user_node.drop_nulls().unique()
        sp = (spans.filter(pl.col("stack_id").is_in(users.implode()))
              .select("pid", "tid", pl.col("stack_id").alias("user_node"),
                      pl.col("ts_ns").alias("inst_ts"),
                      (pl.col("ts_ns") + pl.col("dur_ns")).alias("inst_end")).sort("inst_ts"))
        return (frame.join_asof(sp, left_on="ts_ns", right_on="inst_ts",
                                by=["pid", "tid", "user_node"], strategy="backward",
                                check_sortedness=False)
                .select(pl.coalesce(pl.when(pl.col("inst_end") >= pl.col("ts_ns"))
                                    .then("inst_ts"), runs).alias("call_instance"))
                .to_series())

    def _build_gaps(self, want: set[str], wheres: list[dict] | None = None) -> pl.DataFrame:
        gaps = self.gap_table()
        gpu = self.gpu_table()
        launcher = gpu["call_idx"].gather(gaps["next_row"])
        call_idx = pl.select(pl.coalesce(gaps["block_idx"], launcher)).to_series()
        calls = self.calls_table()
        c = take(calls.select("pid", "tid", "api", "correlation_id",
                              pl.col("ts_ns").alias("call_ts_ns"), "stack_id", "op_id"), call_idx)
        df = (gaps.select("device_id", "ts_ns", "end_ns", "dur_ns",
                          pl.when(pl.col("block_idx").is_not_null()).then(pl.lit("sync"))
                          .otherwise(pl.lit("launch")).alias("cause"))
              .hstack(c).with_columns(*self.site_of(c["stack_id"])))
        if "in_op_ns" in want:
            df = df.with_columns(self._time_in_op(df))
        return df.select([c for c in df.columns if c in want])

    def _time_in_op(self, gaps: pl.DataFrame) -> pl.Series:
        """Per launch gap: how much of it the CPU spent inside the torch op whose launch ended
        it (from that op's span: Kineto records one per op). Null without spans."""
        spans = self.analysis.data.spans() if hasattr(self.analysis.data, "spans") else None
        if spans is None or spans.height == 0 or "op_id" not in spans.columns:
            return pl.repeat(None, gaps.height, dtype=pl.Int64, eager=True).alias("in_op_ns")
        ops = gaps.filter(pl.col("cause") == "launch")["op_id"].drop_nulls().unique()
        starts = (spans.filter(pl.col("op_id").is_in(ops.implode()))
                  .group_by("pid", "op_id").agg(pl.col("ts_ns").min().alias("op_ts")))
        return (gaps.select("pid", "op_id", "ts_ns", "end_ns", "cause")
                .join(starts, on=["pid", "op_id"], how="left", maintain_order="left")
                .select(pl.when(pl.col("cause") == "launch").then(
                    (pl.col("end_ns") - pl.max_horizontal("ts_ns", "op_ts")).clip(0))
                    .alias("in_op_ns"))
                .to_series())

    def _build_gpu(self, want: set[str], wheres: list[dict] | None = None) -> pl.DataFrame:
        gpu = self.gpu_table()
        rows = gpu.with_row_index("_row")
        if gpu["call_idx"].null_count():
            rows = rows.filter(pl.col("call_idx").is_not_null())
        calls = self.calls_table()
        rows = rows.with_columns(calls["stack_id"].gather(rows["call_idx"]).alias("stack_id"))
        rows = self._keep(rows, wheres)
        idx = rows["call_idx"]
        call_cols = {"tid": "tid", "call_ts_ns": "ts_ns", "call_dur_ns": "dur_ns", "api": "api"}
        picked = [calls[src].gather(idx).alias(dst) for dst, src in call_cols.items()
                  if dst in want]
        df = rows.rename({"size_bytes": "bytes"}).with_columns(picked)
        df = df.with_columns(*self.site_of(df["stack_id"]), pl.col("bytes").fill_null(0),
                             (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"))
        if "launch_wait_ns" in want:
            gaps = self.gap_table().filter(pl.col("block_idx").is_null()
                                           & pl.col("next_row").is_not_null())
            wait = pl.repeat(0, gpu.height, dtype=pl.Int64, eager=True).scatter(
                gaps["next_row"], gaps["dur_ns"])
            df = df.with_columns(wait.gather(df["_row"]).alias("launch_wait_ns"))
        if want & {"flops", "dims_aligned8", "intensity"}:
            mm = self._matmuls()
            pos = pl.repeat(None, calls.height, dtype=pl.Int64, eager=True).scatter(
                mm["call_idx"], pl.int_range(mm.height, eager=True).cast(pl.Int64))
            at = pos.gather(idx)
            df = df.with_columns(mm["flops"].gather(at), mm["dims_aligned8"].gather(at),
                                 mm["intensity"].gather(at))
        return df.select([c for c in df.columns if c in want or c in ("stack_id", "call_idx")])

    def _build_paths(self, want: set[str], wheres: list[dict] | None = None) -> pl.DataFrame:
        paths = self.analysis.call_paths.paths
        df = paths.select([c for c in paths.columns if c in COLUMNS["paths"]
                           and c not in SITE_COLUMNS]).with_columns(
            pl.col("path_id").alias("stack_id"))
        df = df.with_columns(*self.site_of(df["stack_id"]))
        return df.select([c for c in df.columns if c in want or c == "stack_id"])

    def _build_windows(self, want: set[str], wheres: list[dict] | None = None) -> pl.DataFrame:
        data = self.analysis.data
        empty = pl.DataFrame(schema={"device_id": pl.Int32, "window_index": pl.Int64,
                                     "ts_ns": pl.Int64, "dur_ns": pl.Int64, "end_ns": pl.Int64,
                                     "busy_ns": pl.Int64, "busy_frac": pl.Float64})
        if data.gpu.height == 0:
            return empty
        t0 = min(int(df["ts_ns"].min()) for df in (data.calls, data.gpu) if df.height)
        size = max(self.window_ns // WINDOWS, 1)
        busy = self.busy()
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
                .sort("device_id", "window_index"))


# Per-call text columns, gathered from the call table (by ``call_idx``) only for the rows a
# rule's other conditions kept: torch op shapes and dtypes are long strings.
DEFERRED = ("op_id", "op_shapes", "op_dtypes", "dtype")


def deferred_columns(rel: Relations, names: set[str]) -> list[pl.Expr]:
    """Expressions gathering per-call text columns by ``call_idx`` (see ``DEFERRED``): two
    gathers, so text moves only for the rows the expression runs on."""
    calls = rel.calls_table()
    raw = _conform(rel.analysis.data.calls, "call")
    orig = pl.lit(calls["_orig"]).gather(pl.col("call_idx"))
    exprs = [pl.lit(raw["op_id"]).gather(orig).alias("op_id")] if "op_id" in names else []
    for c in ("op_shapes", "op_dtypes"):
        if c in names:
            exprs.append(pl.lit(raw[c]).gather(orig).alias(c))
    if "dtype" in names:
        exprs.append(pl.lit(raw["op_dtypes"]).gather(orig)
                     .str.extract(r'^\[\s*"([^"]*)"', 1).alias("dtype"))
    return exprs


def take(df: pl.DataFrame, idx: pl.Series) -> pl.DataFrame:
    """Rows ``idx`` of ``df``; a null index gives a row of nulls."""
    return pl.DataFrame([df[c].gather(idx) for c in df.columns]) if df.width else df


def _thread_key() -> pl.Expr:
    """One int64 per (pid, tid): OS ids fit in 31 bits (Linux pid_max is at most 2^22)."""
    return ((pl.col("pid").cast(pl.Int64) * (1 << 32))
            + (pl.col("tid").cast(pl.Int64) & 0xFFFFFFFF)).alias("_thread")


def _conform(df: pl.DataFrame, table: str) -> pl.DataFrame:
    """Add the schema columns a producer left out (Kineto calls have no size or stream) as null."""
    from zym.schemas.tables import TABLES, polars_schema

    schema = polars_schema(table)
    missing = [c for c in TABLES[table] if c != "record" and c not in df.columns]
    return df.with_columns([pl.lit(None, schema[c]).alias(c) for c in missing]) if missing else df
