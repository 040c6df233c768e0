"""The facts of one analysis window, each defined once: every table, rule and output reads them.

* ``calls``: the CUDA API calls in time order with ``call_idx`` (their row here), the GPU
  operation each one caused (``own_row``), whether the call **blocks** the CPU until the GPU
  catches up (:func:`blocking`) and the GPU completion it waited for (``awaited_end_ns``);
* ``gpu``: the GPU operations with ``gpu_idx``, ``call_idx`` (the launching call, by CUDA
  correlation id: :func:`zym.analysis.correlate.match_rows`) and ``work`` (kernels, copies and
  memsets occupy the GPU; CUPTI sync records time a host wait and do not);
* ``busy``: the GPU busy periods per device (:func:`zym.analysis.timeline.busy_intervals`);
* ``gaps``: the idle gaps between them, with the blocking call the CPU was in when each began;
* ``sites``: per stack node, its call site (:mod:`zym.analysis.sites`);
* ``gpu_ns``: **GPU time**, the one definition: the summed duration of GPU work.

Everything is built on first use and kept, with polars joins and gathers (no per-event Python).
"""
from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from zym.schemas.apis import is_blocking_api
from zym.schemas.errors import InputError
from zym.schemas.lookup import distinct_text, per_distinct

from .correlate import match_rows
from .kernels import classify_kernels, classify_names
from .sites import site_frames, site_table
from .timeline import busy_intervals, gpu_work

if TYPE_CHECKING:
    from .load import CaptureData

EVENT_SITE_COLUMNS = ("code_site", "site_id", "user_node")  # carried on every event row
ROW = pl.Int32  # a row of the calls or GPU table (``call_idx``, ``gpu_idx``, ``own_row``):
ROW_MAX = (1 << 31) - 1  # 4 bytes a row, not 8 (2^31 calls would need some 250 GB here)


def rows_fit(n: int, what: str) -> int:
    """``n``, or a one-line error where ``n`` rows do not fit in a :data:`ROW`."""
    if n > ROW_MAX:
        raise InputError(f"{n:,} {what} in the window: zym analyses at most {ROW_MAX:,} at "
                         "once; pick part of the capture with --window FROM:TO")
    return n


def thread_key() -> pl.Expr:
    """One int64 per (pid, tid): OS ids fit in 31 bits (Linux pid_max is at most 2^22)."""
    return ((pl.col("pid").cast(pl.Int64) * (1 << 32))
            + (pl.col("tid").cast(pl.Int64) & 0xFFFFFFFF)).alias("_thread")


def conform(df: pl.DataFrame, table: str) -> pl.DataFrame:
    """Add the schema columns a producer left out (Kineto calls have no size or stream) as null."""
    from zym.schemas.tables import TABLES, polars_schema

    schema = polars_schema(table)
    missing = [c for c in TABLES[table] if c != "record" and c not in df.columns]
    return df.with_columns([pl.lit(None, schema[c]).alias(c) for c in missing]) if missing else df


def conformed(data: CaptureData, table: str) -> pl.DataFrame:
    """:func:`conform` of the capture's ``call`` or ``gpu`` table, once per capture."""
    cache = data.__dict__.setdefault("_conformed", {})
    if table not in cache:
        cache[table] = conform(data.calls if table == "call" else data.gpu, table)
    return cache[table]


def take(df: pl.DataFrame, idx: pl.Series) -> pl.DataFrame:
    """Rows ``idx`` of ``df``; a null index gives a row of nulls."""
    return df.select(pl.all().gather(idx)) if df.width else df


def api_blocks(api: pl.Series) -> pl.Series:
    """:func:`zym.schemas.apis.is_blocking_api` of each call's API name (null where none)."""
    return per_name(api, is_blocking_api).alias("blocks")


def per_name(api: pl.Series, test: Callable[[pl.Expr], pl.Expr]) -> pl.Series:
    """``test`` (an expression over API names) of each call's API name (null where none),
    evaluated once per distinct name: the names are few, the calls millions (categorical
    names: :func:`zym.schemas.lookup.per_distinct`; at 12.5 M calls the text and its matching
    row by row were ~0.5 s a test)."""
    return per_distinct(api, lambda names: pl.select(test(pl.lit(names))).to_series())


def blocking(blocks_api: pl.Expr, kind: pl.Expr, src_mem: pl.Expr, dst_mem: pl.Expr
             ) -> pl.Expr:
    """Whether a call blocks its CPU thread until the GPU has done (some of) its queued work
    (``blocks_api``: :func:`api_blocks` of its API name).

    Syncs; synchronous copies and memsets (no ``Async`` in the name); and async copies that
    touch pageable host memory, which the driver stages synchronously (CUDA Runtime API,
    "API synchronization behavior"). A copy whose memory kinds are unknown (no GPU side in the
    capture) counts as blocking: PyTorch's own device-to-host copies land in pageable memory.
    """
    pageable = (src_mem == "pageable") | (dst_mem == "pageable")
    unknown = src_mem.is_null() & dst_mem.is_null()
    return (blocks_api | (kind == "sync")
            | ((kind == "copy") & (pageable | unknown))).fill_null(False)


class Facts:
    """The facts of one (windowed) capture. See the module doc."""

    def __init__(self, data: CaptureData, nodes: pl.DataFrame,
                 window: tuple[int, int] | None = None) -> None:
        self.data = data
        self.nodes = nodes
        if window is not None:  # an analysis window chosen by the caller
            self.__dict__["window"] = window

    def drop_derived(self) -> None:
        """Let go of every table derived from the capture's (built again if asked for): for a
        caller that reads only the capture's tables from here on (a timeline export: at 1.4 M
        rows the derived tables were ~230 MB of ~1 GB)."""
        for name in [k for k in self.__dict__ if k not in ("data", "nodes", "window")]:
            del self.__dict__[name]

    # -- sites -------------------------------------------------------------------------------

    @cached_property
    def sites(self) -> pl.DataFrame:
        """The site table, its id columns in 4 bytes where their values fit: each is gathered
        for every event a rule keeps (50 MB a column at 12.5 M calls)."""
        sites = site_table(self.nodes)
        return sites.with_columns(
            pl.col(c).cast(pl.Int32) for c in EVENT_SITE_COLUMNS if _fits_int32(sites[c]))

    @cached_property
    def sites_with_frames(self) -> pl.DataFrame:
        """:attr:`sites` with ``frames``, each site's Python frames as text
        (:func:`~zym.analysis.sites.site_frames`): built only where a rule reads it."""
        frames = site_frames(self.nodes).select(
            pl.col("stack_id").cast(self.sites["site_id"].dtype).alias("site_id"), "frames")
        return self.sites.join(frames, on="site_id", how="left", maintain_order="left")

    def site_of(self, stack: pl.Series, columns: tuple[str, ...] = EVENT_SITE_COLUMNS
                ) -> list[pl.Series]:
        """Site columns for each stack id of ``stack`` (null where the site table has none):
        through one lookup table per analysis when the ids are dense (they index it), else
        :func:`zym.schemas.lookup.first_row_of`."""
        if self._site_rows is None:
            from zym.schemas.lookup import first_row_of

            idx = first_row_of(self.sites["stack_id"], stack.cast(pl.Int64))
            return [self.sites[c].gather(idx).alias(c) for c in columns]
        return self._site_padded[self._site_at(stack), list(columns)].get_columns()

    def site_table_rows(self, stack: pl.Series) -> tuple[pl.DataFrame, np.ndarray]:
        """The site table with a row of nulls appended, and each stack id's row of it (the
        null row where it has none): per-site values worked out once on the table's rows,
        then gathered per event by these positions."""
        if self._site_rows is None:
            from zym.schemas.lookup import first_row_of

            idx = first_row_of(self.sites["stack_id"], stack.cast(pl.Int64))
            return self._site_padded, idx.fill_null(self.sites.height).to_numpy()
        return self._site_padded, self._site_at(stack)

    def _site_at(self, stack: pl.Series) -> np.ndarray:
        """Each stack id's row of the padded site table (needs ``_site_rows``)."""
        q = stack.cast(pl.Int64)
        q = (q.fill_null(-1) if q.null_count() else q).to_numpy()
        # an id below 0 (none) or past the table reads the table's last entry: the null row
        return self._site_lut.take(np.clip(q, -1, len(self._site_rows)))

    @cached_property
    def _site_lut(self) -> np.ndarray:
        """``_site_rows`` with a row of the padded site table for every id (the null row past
        the end where the table has none, and at one entry more, for ids out of range), in
        polars' index type where it fits: one gather per event, no masks."""
        rows = self._site_rows
        lut = np.append(rows, -1)
        lut[lut < 0] = self.sites.height
        return lut.astype(np.uint32) if self.sites.height < np.iinfo(np.uint32).max else lut

    @cached_property
    def _site_rows(self) -> np.ndarray | None:
        """Per stack id (an index), the first row of the site table that holds it, -1 where
        none; None when the ids are not small non-negative integers (then a hash join)."""
        keys = self.sites["stack_id"].drop_nulls()
        if keys.len() and (keys.min() < 0 or keys.max() >= 4 * keys.len() + 1024):
            return None
        k = keys.cast(pl.Int64).to_numpy()
        pos = np.flatnonzero(self.sites["stack_id"].is_not_null().to_numpy())
        rows = np.full(int(k.max()) + 1 if len(k) else 0, -1, np.int64)
        rows[k[::-1]] = pos[::-1]  # reversed: the first row of a key is written last
        return rows

    @cached_property
    def _site_padded(self) -> pl.DataFrame:
        """The site table with one row of nulls appended (what a missing id gathers)."""
        nulls = pl.DataFrame([pl.Series(c, [None], dtype=t) for c, t in self.sites.schema.items()])
        return pl.concat([self.sites, nulls])

    # -- calls -------------------------------------------------------------------------------

    @cached_property
    def calls(self) -> pl.DataFrame:
        """The call table in time order (see the module doc for the added columns)."""
        raw = conformed(self.data, "call")
        # Narrow: long per-call text (shapes, dtypes) stays in the capture's table and is
        # gathered through ``_orig`` only for rows a rule keeps. API names are few: as a
        # categorical, sorting and gathering moves an integer, not text.
        calls = raw.select("pid", "tid", "ts_ns", "dur_ns", pl.col("name").cast(pl.Categorical)
                           .alias("api"), "kind", "correlation_id", "stack_id", "size_bytes",
                           "copy_kind", "op_id")
        rows_fit(calls.height, "CUDA calls")
        end = (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns")
        if calls["ts_ns"].is_sorted():
            # a call's row is its capture row: one column, shared (not a copy), made in
            # ``ROW`` at once (a row index and its cast, twice, were ~0.1 s at 12.5 M calls)
            calls = calls.select(pl.int_range(pl.len(), dtype=ROW).alias("call_idx"),
                                 pl.all(), thread_key(), end)
            calls = calls.select("call_idx", pl.col("call_idx").alias("_orig"),
                                 pl.exclude("call_idx"))
        else:
            calls = (calls.with_row_index("_orig").sort("ts_ns", maintain_order=True)
                     .with_columns(thread_key()).with_row_index("call_idx")
                     .with_columns(pl.col("call_idx").cast(ROW), pl.col("_orig").cast(ROW), end))
        gpu = self._work_rows(calls)
        at = first_own_row(gpu["call_idx"], calls.height)  # by call_idx: the row order
        g = gpu.select("copy_kind", "src_mem", "dst_mem", "size_bytes")
        calls = calls.with_columns(
            at.alias("own_row"),
            pl.coalesce(pl.col("copy_kind"), g["copy_kind"].gather(at)).alias("copy_kind"),
            g["src_mem"].gather(at).alias("src_mem"), g["dst_mem"].gather(at).alias("dst_mem"),
            pl.coalesce(g["size_bytes"].gather(at), pl.col("size_bytes")).alias("bytes"))
        # (the own operation's duration and end are read through ``own_row`` where needed:
        # per-call copies of them were 200 MB at 10 M calls)
        # (the capture's own byte count is in ``bytes`` now: not kept twice)
        return calls.drop("size_bytes").with_columns(blocking(
            pl.lit(api_blocks(calls["api"])), pl.col("kind"), pl.col("src_mem"),
            pl.col("dst_mem")).alias("blocking"))

    @cached_property
    def many_threads(self) -> bool:
        t = self.calls["_thread"]
        return bool(t.len()) and t.min() != t.max()

    # -- GPU ---------------------------------------------------------------------------------

    def _work_rows(self, calls: pl.DataFrame) -> pl.DataFrame:
        """The GPU table matched to ``calls`` (used while ``calls`` is being built)."""
        gpu = conformed(self.data, "gpu")
        rows = match_rows(calls["pid"], calls["correlation_id"], gpu["pid"],
                          gpu["correlation_id"]).cast(ROW)  # (calls' rows fit: ``rows_fit``)
        self._call_rows = rows  # the calls' order is final here: ``gpu`` reuses the match
        # Only the columns the calls read: what a copy's own row says, and the call (a
        # call's own GPU row is work, not a sync record).
        return gpu.select("copy_kind", "src_mem", "dst_mem", "size_bytes", pl.when(
            pl.col("kind") != "sync").then(rows).alias("call_idx"))

    @cached_property
    def gpu(self) -> pl.DataFrame:
        """GPU operations with ``gpu_idx``, ``call_idx``, ``stack_id`` (of the launching call),
        ``end_ns``, ``work`` and the kernel classes (:mod:`zym.analysis.kernels`)."""
        calls = self.calls
        gpu = conformed(self.data, "gpu")
        rows_fit(gpu.height, "GPU operations")
        rows = self.__dict__.pop("_call_rows")  # read once: not kept beside the column
        # (the row index made in ``ROW`` at once, not as an index and a cast of it)
        gpu = gpu.select(pl.int_range(pl.len(), dtype=ROW).alias("gpu_idx"), pl.all(),
                         rows.alias("call_idx")).with_columns(
            pl.col("device_id").fill_null(-1), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
            (pl.col("kind") != "sync").fill_null(True).alias("work"))
        return gpu.with_columns(calls["stack_id"].gather(gpu["call_idx"]).alias("stack_id"),
                                *classify_kernels(gpu["name"], gpu["kind"], self.kernel_table))

    @cached_property
    def kernel_table(self) -> pl.DataFrame:
        """The kernel classes of each distinct GPU operation name
        (:func:`zym.analysis.kernels.classify_names`): a window's facts share the whole
        capture's (its names are among them)."""
        names = conformed(self.data, "gpu")["name"]
        return classify_names(distinct_text(names))

    @cached_property
    def gpu_ns(self) -> int:
        """GPU time: the summed duration of GPU work (kernels, copies, memsets)."""
        return int(gpu_work(_columns(self.data.gpu, "kind", "dur_ns"))["dur_ns"].sum() or 0)

    @cached_property
    def busy(self) -> pl.DataFrame:
        """GPU busy periods per device: ``device_id, start_ns, end_ns, first_row`` (the
        ``gpu_idx`` of the operation that opened the period)."""
        return busy_intervals(self.gpu.drop("gpu_idx"))

    @cached_property
    def window(self) -> tuple[int, int]:
        """``(start_ns, end_ns)``: from the first recorded call or GPU operation to the end of the
        last; ``(0, 0)`` for an empty capture."""
        bounds = [df.select(pl.col("ts_ns").min().alias("lo"),
                            (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("hi")).row(0)
                  for df in (self.data.calls, gpu_work(_columns(self.data.gpu, "kind", "ts_ns",
                                                                "dur_ns"))) if df.height]
        if not bounds:
            return (0, 0)
        return (min(lo for lo, _ in bounds), max(hi for _, hi in bounds))

    @property
    def window_ns(self) -> int:
        lo, hi = self.window
        return hi - lo

    @cached_property
    def gaps(self) -> pl.DataFrame:
        """Idle gaps per device between busy periods (leading and trailing idle excluded):
        ``device_id, ts_ns, end_ns, dur_ns, next_row`` (the GPU op that ended it) and
        ``block_idx``: the blocking call the CPU was in when the GPU went idle, or null."""
        gaps = (self.busy
                .with_columns(pl.col("end_ns").shift(1).over("device_id").alias("gap_start"))
                .filter(pl.col("gap_start").is_not_null()
                        & (pl.col("start_ns") > pl.col("gap_start")))
                .select("device_id", pl.col("gap_start").alias("ts_ns"),
                        pl.col("start_ns").alias("end_ns"), pl.col("first_row").alias("next_row"))
                .with_columns((pl.col("end_ns") - pl.col("ts_ns")).alias("dur_ns")))
        # The blocking call running when the GPU went idle (the latest one started before).
        held = (self.calls.select("call_idx", pl.col("ts_ns").alias("b_ts"),
                                  pl.col("end_ns").alias("b_end"), "blocking")
                .filter("blocking").drop("blocking"))
        return (gaps.sort("ts_ns")
                .join_asof(held, left_on="ts_ns", right_on="b_ts", strategy="backward",
                           check_sortedness=False)
                .with_columns(pl.when(pl.col("b_end") >= pl.col("ts_ns")).then("call_idx")
                              .alias("block_idx"))
                .drop("call_idx", "b_ts", "b_end"))

    # -- counts the header shows -------------------------------------------------------------

    @cached_property
    def counts(self) -> dict:
        """Calls, GPU operations by kind (sync records apart: they are not GPU work),
        processes and threads."""
        kinds = dict(self.gpu.group_by("kind").len().iter_rows()) if self.gpu.height else {}
        calls = self.calls
        return {
            "calls": calls.height,
            "gpu_ops": sum(v for k, v in kinds.items() if k != "sync"),
            "kernels": kinds.get("kernel", 0), "copies": kinds.get("copy", 0),
            "memsets": kinds.get("memset", 0), "sync_records": kinds.get("sync", 0),
            "processes": calls["pid"].n_unique() if calls.height else 0,
            "threads": calls["_thread"].n_unique() if calls.height else 0,
        }


def _fits_int32(column: pl.Series) -> bool:
    lo, hi = column.min(), column.max()
    return lo is None or (lo >= -(1 << 31) and hi < 1 << 31)


def _columns(df: pl.DataFrame, *names: str) -> pl.DataFrame:
    """``df``'s columns ``names`` that it has (filter these, not every column)."""
    return df.select(c for c in names if c in df.columns)


def first_own_row(call_idx: pl.Series, n_calls: int) -> pl.Series:
    """Per call (0..n_calls-1), the first row of ``call_idx`` naming it, or null."""
    ok = call_idx.is_not_null()
    rows = pl.int_range(call_idx.len(), dtype=ROW, eager=True).filter(ok).reverse()
    return pl.repeat(None, n_calls, dtype=ROW, eager=True).scatter(
        call_idx.filter(ok).reverse(), rows)
