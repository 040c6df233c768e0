"""NVTX ranges: CUPTI's marker records -> ranges -> the capture's ``range`` table and a layer of
every call's stack.

CUPTI records an NVTX range as two marker records with one id: a start (flag START, with the
range's name and domain) and an end (flag END, no name); ``nvtxMark`` gives one record (flag
INSTANT). ``nvtxRangePush``/``Pop`` and ``nvtxRangeStart``/``End`` both come out this way.

* ``pair_ranges``: starts and ends paired by (process, id), in time order, all at once (a sort
  and a shift, no per-record Python); what the ids leave unpaired is paired per thread as
  pushes and pops pair (an end closes the latest open start), counted in the statistics
  (``paired_by_thread_order``: 0 where CUPTI gives a pop its push's id). A start without an end (the range was open when the
  capture stopped) ends at the end of the process's recording, ``clipped = "end"``; an end
  without a start (opened before recording began, e.g. before an attach) starts at the
  recording's start, ``clipped = "start"``, and has no name (CUPTI names a range at its start).
* ``nest_ranges``: each range's parent (the innermost range of its thread open when it began)
  and depth, with the Kineto importer's interval nesting (``capture.kineto.nest_intervals``).
* ``add_range_layer``: every call made inside a range on its thread gets the enclosing ranges
  as frames of kind ``nvtx``, outermost first, placed right below the call's innermost Python
  frame (above any native, torch op and CUDA API frames; at the root when the stack has no
  Python frame), at most the outermost ``MAX_LAYER``. GPU work inherits them through its
  launching call. Ranges nested deeper than ``MAX_DEPTH`` (a push without its pop, in a loop)
  are dropped and counted. A call recorded without a
  stack (a capture without eBPF) keeps none: a stack made of ranges alone would count as a
  known call path ("has its Python line") when no Python line is known.

A frame's name is the range's name without the per-instance suffix that torch's ``emit_nvtx``
appends (``aten::addmm, seq = 12, op_id = 40, sizes = [...]`` -> ``aten::addmm``), so that
repeated operators share one call path; the ``range`` table keeps the full name. An ``nvtx``
frame's ``file`` is the range's NVTX domain (null: the default domain).
"""
from __future__ import annotations

import numpy as np
import polars as pl
from zym.schemas.lookup import first_row_of
from zym.schemas.stacks import intern_forest

from .layouts import MARKER_END, MARKER_INSTANT, MARKER_START, OBJECT_THREAD

UNNAMED = "(NVTX range begun before recording)"
# torch.autograd.profiler.emit_nvtx names (torch/csrc/profiler/util.cpp getNvtxStr):
# "<op>, seq = N", then ", op_id = N", ", sizes = [...]", ", input_op_ids = [...]"
EMIT_NVTX_SUFFIX = r", (?:seq|op_id|sizes|input_op_ids) = .*$"
RANGE_COLUMNS = {"pid": pl.Int64, "tid": pl.Int64, "ts_ns": pl.Int64, "dur_ns": pl.Int64,
                 "name": pl.String, "kind": pl.String, "domain": pl.String,
                 "clipped": pl.String}
MAX_DEPTH = 2047  # nesting kept (the file's bound on depths); deeper ranges are dropped, counted
MAX_LAYER = 64    # ranges a call's stack holds at most: the outermost 64 that enclose it


def empty_ranges() -> pl.DataFrame:
    return pl.DataFrame(schema=RANGE_COLUMNS | {"by_order": pl.Boolean})


def markers_frame(records: np.ndarray, buffer_of: np.ndarray, names: dict[int, dict[int, str]],
                  ts_mono: np.ndarray, pid: int) -> pl.DataFrame:
    """Marker records as a frame: ``pid, tid, ts_ns, flags, id, name, domain`` (times already
    in CLOCK_MONOTONIC: ``ts_mono``). ``names``: per buffer index, its pointer -> string map
    (the agent reads them when the buffer completes); ``buffer_of``: each record's buffer."""
    thread = records["object_kind"] == OBJECT_THREAD
    df = pl.DataFrame({
        "pid": np.where(thread, records["process_id"].astype(np.int64), pid),
        "tid": np.where(thread, records["thread_id"].astype(np.int64), 0),
        "ts_ns": ts_mono, "flags": records["flags"].astype(np.int64),
        "id": records["id"].astype(np.int64), "buffer": buffer_of.astype(np.int64),
        "name_ptr": records["name"].astype(np.int64),
        "domain_ptr": records["domain"].astype(np.int64)})
    table = pl.DataFrame(
        [(b, int(p), s) for b, m in names.items() for p, s in m.items()] or None,
        schema={"buffer": pl.Int64, "ptr": pl.Int64, "text": pl.String}, orient="row")
    for col in ("name", "domain"):
        df = df.join(table.rename({"ptr": f"{col}_ptr", "text": col}),
                     on=["buffer", f"{col}_ptr"], how="left", maintain_order="left")
    return df.select("pid", "tid", "ts_ns", "flags", "id", "name", "domain")


def pair_ranges(markers: pl.DataFrame, first_ns: int, last_ns: int) -> pl.DataFrame:
    """Ranges (``RANGE_COLUMNS``) from marker records; ``first_ns``/``last_ns``: when the
    process's recording began and ended (the bounds of clipped ranges)."""
    if markers.height == 0:
        return empty_ranges()
    flags = pl.col("flags")
    m = markers.with_columns(((flags & MARKER_START) != 0).alias("is_start"),
                             ((flags & MARKER_END) != 0).alias("is_end"))
    marks = m.filter((flags & MARKER_INSTANT) != 0).select(
        "pid", "tid", "ts_ns", pl.lit(0, pl.Int64).alias("dur_ns"),
        pl.col("name").fill_null(UNNAMED), pl.lit("nvtx_mark").alias("kind"), "domain",
        pl.lit(None, pl.String).alias("clipped"))
    se = (m.filter(pl.col("is_start") | pl.col("is_end"))
          .sort("pid", "id", "ts_ns", "is_end"))   # at one instant a start comes first
    same_next = (pl.col("pid") == pl.col("pid").shift(-1)) & (pl.col("id") == pl.col("id").shift(-1))
    same_prev = (pl.col("pid") == pl.col("pid").shift(1)) & (pl.col("id") == pl.col("id").shift(1))
    se = se.with_columns(
        pl.when(same_next.fill_null(False) & pl.col("is_end").shift(-1).fill_null(False))
        .then(pl.col("ts_ns").shift(-1)).alias("end_ns"),
        (same_prev.fill_null(False) & pl.col("is_start").shift(1).fill_null(False))
        .alias("has_start")).with_row_index("row")
    # what the ids leave unpaired is paired by thread order, as push and pop pair (LIFO)
    open_starts = se.filter(pl.col("is_start") & pl.col("end_ns").is_null())
    lone_ends = se.filter(pl.col("is_end") & ~pl.col("has_start"))
    by_order = _pair_in_thread_order(open_starts, lone_ends)
    se = se.join(by_order.select("row", pl.col("end_ns").alias("order_end")), on="row",
                 how="left").with_columns(
        pl.col("order_end").is_not_null().alias("by_order"),
        pl.coalesce("end_ns", "order_end").alias("end_ns"),
        (pl.col("has_start") | pl.col("row").is_in(by_order["end_row"].implode()))
        .alias("has_start"))
    starts = se.filter(pl.col("is_start")).select(
        "pid", "tid", "ts_ns",
        (pl.col("end_ns").fill_null(pl.max_horizontal(pl.lit(last_ns), pl.col("ts_ns")))
         - pl.col("ts_ns")).alias("dur_ns"),
        pl.col("name").fill_null(UNNAMED), pl.lit("nvtx").alias("kind"), "domain",
        pl.when(pl.col("end_ns").is_null()).then(pl.lit("end")).alias("clipped"), "by_order")
    orphans = se.filter(pl.col("is_end") & ~pl.col("has_start")).select(
        "pid", "tid", pl.min_horizontal(pl.lit(first_ns), pl.col("ts_ns")).alias("ts_ns"),
        (pl.col("ts_ns") - pl.min_horizontal(pl.lit(first_ns), pl.col("ts_ns"))).alias("dur_ns"),
        pl.lit(UNNAMED).alias("name"), pl.lit("nvtx").alias("kind"), "domain",
        pl.lit("start").alias("clipped"), pl.lit(False).alias("by_order"))
    out = pl.concat([starts, orphans, marks.with_columns(pl.lit(False).alias("by_order"))],
                    how="vertical_relaxed")
    return out.select([pl.col(c).cast(t) for c, t in (RANGE_COLUMNS | {"by_order": pl.Boolean}
                                                      ).items()]).sort(
        "pid", "tid", "ts_ns", pl.col("dur_ns"), descending=[False, False, False, True])


def _pair_in_thread_order(starts: pl.DataFrame, ends: pl.DataFrame) -> pl.DataFrame:
    """Starts and ends (``row, pid, tid, ts_ns``) paired as pushes and pops pair on a thread:
    an end closes the latest start of its thread still open. Returns ``row`` (the start),
    ``end_row``, ``end_ns``. The nesting level of each event comes from a running sum of +1 per
    start and -1 per end, measured from its running minimum (an end with nothing open, level
    0, lowers the floor and pairs with nothing); the k-th start and the k-th end of one level
    of one thread are a pair."""
    cols = ["row", "pid", "tid", "ts_ns"]
    ev = (pl.concat([starts.select(*cols, pl.lit(1).alias("step")),
                     ends.select(*cols, pl.lit(-1).alias("step"))])
          .sort("pid", "tid", "ts_ns", "step", descending=[False, False, False, True]))
    thread = ["pid", "tid"]
    ev = ev.with_columns(pl.col("step").cum_sum().over(thread).alias("c")).with_columns(
        pl.min_horizontal(pl.col("c").cum_min().over(thread), pl.lit(0)).alias("floor"))
    before = (pl.col("c") - pl.col("step")) - pl.col("floor").shift(1).over(thread).fill_null(0)
    ev = ev.with_columns(pl.when(pl.col("step") == 1).then(pl.col("c") - pl.col("floor"))
                         .otherwise(before).alias("level"))
    ev = ev.filter(pl.col("level") > 0).with_columns(
        pl.int_range(pl.len()).over("pid", "tid", "level", "step").alias("k"))
    key = ["pid", "tid", "level", "k"]
    return (ev.filter(pl.col("step") == 1).select(*key, "row")
            .join(ev.filter(pl.col("step") == -1).select(*key, pl.col("row").alias("end_row"),
                                                        pl.col("ts_ns").alias("end_ns")),
                  on=key, how="inner").select("row", "end_row", "end_ns"))


def _thread_key() -> pl.Expr:
    """One integer per (pid, tid): the nesting helpers key on a single thread column."""
    return (pl.col("pid") * (1 << 32) + pl.col("tid")).alias("tid")


def nest_ranges(ranges: pl.DataFrame) -> pl.DataFrame:
    """``ranges`` with ``node`` (its row), ``parent`` (the node of the innermost range of its
    thread that was open when it began; null at the top; marks have none) and ``depth``."""
    from ..kineto import nest_intervals

    r = ranges.with_row_index("node").with_columns(pl.col("node").cast(pl.Int64))
    spans = r.filter(pl.col("kind") == "nvtx")
    parent = nest_intervals(spans.select("node", _thread_key(), "ts_ns", "dur_ns"))
    tree = spans.select("node").with_columns(parent.alias("parent"))
    r = r.join(tree, on="node", how="left", maintain_order="left")
    up = first_row_of(r["node"], r["parent"])
    depth = pl.Series(np.zeros(r.height, np.int32))
    cur = up
    for _ in range(MAX_DEPTH + 1):   # a range still below an ancestor after this is too deep
        live = cur.is_not_null()
        if not live.any():
            break
        depth = depth + live.cast(pl.Int32)
        cur = up.gather(cur)
    return r.with_columns(depth.alias("depth"))


def frame_name() -> pl.Expr:
    """A range's frame name: its name without torch emit_nvtx's per-instance suffix."""
    return pl.col("name").str.replace(EMIT_NVTX_SUFFIX, "")


def add_range_layer(tables: dict[str, pl.DataFrame], ranges: pl.DataFrame
                    ) -> tuple[dict[str, pl.DataFrame], dict]:
    """``tables`` (``frame``, ``stack``, ``call``; any may be absent) with the ``range`` table
    added and the ranges as a layer of the calls' stacks (see the module doc); also returns
    statistics for the capture metadata."""
    tables = dict(tables)
    if ranges.height == 0:
        return tables, {"ranges": 0}
    nested = nest_ranges(ranges)
    too_deep = int((nested["depth"] > MAX_DEPTH).sum())   # e.g. a push without its pop, looped
    nested = nested.filter(pl.col("depth") <= MAX_DEPTH)
    frames = _frame_table(tables.get("frame"))
    stacks = tables.get("stack")
    stacks = stacks if stacks is not None and stacks.height else None
    calls = tables.get("call")
    spans = nested.filter(pl.col("kind") == "nvtx")
    frames, spans = _with_frame_ids(frames, spans, "nvtx", frame_name(), pl.col("domain"))
    path_of, paths = intern_forest(spans.select("node", "parent", "frame_id"))
    nested = nested.join(path_of.rename({"stack_id": "path"}), on="node", how="left",
                         maintain_order="left")
    layer = spans.filter(pl.col("depth") < MAX_LAYER)   # closed under parents: an ancestor set
    inner = _innermost(calls, layer) if calls is not None and calls.height else None
    stats = {"ranges": int(spans.height), "marks": int(nested.height - spans.height),
             "clipped_start": int(nested["clipped"].is_in(["start", "both"]).sum()),
             "clipped_end": int(nested["clipped"].is_in(["end", "both"]).sum()),
             "max_depth": int(nested["depth"].max() or 0), "dropped_too_deep": too_deep,
             "paired_by_thread_order": int(nested["by_order"].fill_null(False).sum())
             if "by_order" in nested.columns else 0,
             "calls_in_ranges": 0 if inner is None else int(inner["range_node"].is_not_null().sum())}
    if inner is not None:
        inner = inner.join(nested.select(pl.col("node").alias("range_node"), "path"),
                           on="range_node", how="left", maintain_order="left")
    new_stacks, call_stack, range_stack = _layered_trie(stacks, frames, paths, inner)
    tables["frame"] = frames
    tables["stack"] = new_stacks
    if calls is not None:
        tables["call"] = calls.with_columns(call_stack.alias("stack_id")) \
            if call_stack is not None else calls
    tables["range"] = nested.with_columns(range_stack(nested["path"]).alias("stack_id")).select(
        *RANGE_COLUMNS, "stack_id", "depth")
    return tables, stats


def _frame_table(frames: pl.DataFrame | None) -> pl.DataFrame:
    """The frame table with every column of the schema's (absent ones null)."""
    from zym.schemas.tables import polars_schema

    schema = {c: t for c, t in polars_schema("frame").items() if c != "record"}
    if frames is None or frames.height == 0:
        return pl.DataFrame(schema=schema)
    return frames.with_columns(pl.lit(None, t).alias(c) for c, t in schema.items()
                               if c not in frames.columns).select(
        [pl.col(c).cast(t) for c, t in schema.items()])


def _with_frame_ids(frames: pl.DataFrame, rows: pl.DataFrame, kind: str, name: pl.Expr,
                    file: pl.Expr) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``rows`` with ``frame_id`` of the frame (kind, name, file) each describes, the frame
    table with the frames it lacked appended."""
    keys = probe = rows.select(pl.lit(kind).alias("kind"), name.alias("name"), file.alias("file"))
    known = frames.filter(pl.col("kind") == kind).select("kind", "name", "file", "frame_id")
    new = (keys.unique(maintain_order=True)
           .join(known, on=["kind", "name", "file"], how="anti", nulls_equal=True))
    first = int(frames["frame_id"].max()) + 1 if frames.height else 0
    new = new.with_row_index("frame_id", offset=first).with_columns(pl.col("frame_id").cast(pl.Int64))
    frames = pl.concat([frames, new], how="diagonal_relaxed").select(frames.columns)
    lookup = frames.filter(pl.col("kind") == kind).select("kind", "name", "file", "frame_id")
    ids = probe.join(lookup, on=["kind", "name", "file"], how="left", nulls_equal=True,
                     maintain_order="left")["frame_id"]
    return frames, rows.with_columns(ids.alias("frame_id"))


def _innermost(calls: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """Per call (in call order): ``stack_id``, ``name`` and ``range_node``, the innermost range
    of its thread running when it began (null: none)."""
    from ..kineto import innermost_enclosing

    points = calls.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("node"), _thread_key(),
                          "ts_ns")
    iv = spans.select("node", _thread_key(), "ts_ns", "dur_ns")
    found = innermost_enclosing(points, iv, spans.select("node", "parent"))
    by_call = pl.repeat(None, calls.height, dtype=pl.Int64, eager=True).scatter(
        found["node"], found["parent"])
    return calls.select("stack_id", "name").with_columns(by_call.alias("range_node"))


def _ancestors(trie: pl.DataFrame, leaves: pl.Series) -> pl.DataFrame:
    """``leaf, depth, frame_id`` of every node on the root path of each of ``leaves`` (ids of
    ``trie``: ``stack_id, parent_id, frame_id, depth``), one gather per level."""
    up = first_row_of(trie["stack_id"], trie["parent_id"])
    cur = first_row_of(trie["stack_id"], leaves)
    out = []
    for _ in range(int(trie["depth"].max() or 0) + 2):
        live = cur.is_not_null()
        if not live.any():
            break
        rows = cur.filter(live)
        out.append(pl.DataFrame({"leaf": leaves.filter(live),
                                 "depth": trie["depth"].gather(rows).cast(pl.Int64),
                                 "frame_id": trie["frame_id"].gather(rows)}))
        cur = up.gather(cur)
    return pl.concat(out) if out else pl.DataFrame(
        schema={"leaf": pl.Int64, "depth": pl.Int64, "frame_id": pl.Int64})


def _layered_trie(stacks: pl.DataFrame | None, frames: pl.DataFrame, paths: pl.DataFrame,
                  inner: pl.DataFrame | None):
    """The stack trie with the range layer: the old stacks, each (stack, range path) pair of a
    call inside a range as a new path, and the range paths themselves, interned together.
    Returns (stack table, every call's new stack id or None, range path id -> stack id)."""
    old = stacks if stacks is not None else pl.DataFrame(
        schema={"stack_id": pl.Int64, "parent_id": pl.Int64, "frame_id": pl.Int64,
                "depth": pl.Int32})
    old_span = int(old["stack_id"].max()) + 1 if old.height else 0
    nodes = [old.select(pl.col("stack_id").alias("node"), pl.col("parent_id").alias("parent"),
                        "frame_id")]
    key_nodes = None
    if inner is not None:
        keyed = inner.with_row_index("call").filter(pl.col("range_node").is_not_null()
                                                    & pl.col("stack_id").is_not_null())
        keys = (keyed.select("stack_id", "path").unique(maintain_order=True)
                .with_row_index("key").with_columns(pl.col("key").cast(pl.Int64)))
        rows = _key_rows(keys, old, frames, paths)
        width = int(rows["pos"].max()) + 1 if rows.height else 1
        rows = rows.with_columns((old_span + pl.col("key") * width + pl.col("pos")).alias("node"))
        nodes.append(rows.select("node", pl.when(pl.col("pos") > 0).then(pl.col("node") - 1)
                                 .alias("parent"), "frame_id"))
        leaf = rows.group_by("key").agg(pl.col("node").max().alias("leaf"))
        key_nodes = (keyed.join(keys, on=["stack_id", "path"], how="left")
                     .join(leaf, on="key", how="left")
                     .select("call", "leaf"))
    path_base = int(pl.concat([n["node"] for n in nodes]).max() or 0) + 1
    nodes.append(paths.select((pl.col("stack_id") + path_base).alias("node"),
                              (pl.col("parent_id") + path_base).alias("parent"), "frame_id"))
    node_stack, trie = intern_forest(pl.concat(nodes, how="vertical_relaxed"))
    remap = node_stack.rename({"node": "old"})

    def mapped(ids: pl.Series) -> pl.Series:
        return (pl.DataFrame({"old": ids}).join(remap, on="old", how="left",
                                                maintain_order="left")["stack_id"])

    call_stack = None
    if inner is not None:
        call_stack = mapped(inner["stack_id"])
        if key_nodes is not None and key_nodes.height:
            call_stack = call_stack.scatter(key_nodes["call"], mapped(key_nodes["leaf"]))
    return trie, call_stack, lambda p: mapped(p + path_base)


def _key_rows(keys: pl.DataFrame, old: pl.DataFrame, frames: pl.DataFrame,
              paths: pl.DataFrame) -> pl.DataFrame:
    """``key, pos, frame_id``: the frames of each (stack, range path) key, root first: the
    stack down to its innermost Python frame, the range path, the rest."""
    kinds = frames.select("frame_id", "kind")
    anc = _ancestors(old, keys["stack_id"].unique()).join(
        kinds, on="frame_id", how="left")
    split = (anc.group_by("leaf").agg(
        pl.col("depth").filter(pl.col("kind") == "python").max().fill_null(-1).alias("split")))
    rng = _ancestors(paths, keys["path"].unique())
    plen = rng.group_by("leaf").agg(pl.len().cast(pl.Int64).alias("plen"))
    k = (keys.join(split.rename({"leaf": "stack_id"}), on="stack_id", how="left")
         .join(plen.rename({"leaf": "path"}), on="path", how="left")
         .with_columns(pl.col("split").fill_null(-1)))
    stack_rows = k.join(anc.rename({"leaf": "stack_id"}), on="stack_id", how="inner").select(
        "key", pl.when(pl.col("depth") <= pl.col("split")).then(pl.col("depth"))
        .otherwise(pl.col("depth") + pl.col("plen")).alias("pos"), "frame_id")
    range_rows = k.join(rng.rename({"leaf": "path"}), on="path", how="inner").select(
        "key", (pl.col("split") + 1 + pl.col("depth")).alias("pos"), "frame_id")
    return pl.concat([stack_rows, range_rows], how="vertical_relaxed").with_columns(
        pl.col("pos").cast(pl.Int64), pl.col("frame_id").cast(pl.Int64))
