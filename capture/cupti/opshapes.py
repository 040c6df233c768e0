"""Operator shapes recorded in the target (``opshapes_target.py``) given to the capture's calls.

A spool's ``op_shapes`` chunks hold, per torch operator the target ran, its thread, start and end
(CLOCK_MONOTONIC ns), name, input shapes and dtypes (JSON text, torch.profiler's notation). A
call (eBPF or CUPTI) gets the shapes and dtypes of the operator running on its thread when it
started: the last operator that started at or before the call on that process and thread, if
it had not ended. Operators are recorded one at a time per thread (the mode does not see the
operators an operator runs), so there is at most one.

>>> frame = shapes_frame([b'[[7,10,50,"aten::mm","[[2, 3], [3, 4]]","[\\\\"float\\\\",\\\\"float\\\\"]"]]'], pid=1)
>>> frame.select("tid", "op", "op_shapes").row(0)
(7, 'aten::mm', '[[2, 3], [3, 4]]')
"""
from __future__ import annotations

import json

import polars as pl

SHAPE_SCHEMA = {"pid": pl.Int64, "tid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
                "op": pl.String, "op_shapes": pl.String, "op_dtypes": pl.String}
_ROW = ("tid", "start_ns", "end_ns", "op", "op_shapes", "op_dtypes")
OP_COLUMN = "_op"


def empty_shapes() -> pl.DataFrame:
    return pl.DataFrame(schema=SHAPE_SCHEMA)


def shapes_frame(chunks: list[bytes], pid: int) -> pl.DataFrame:
    """One process's operator records from its spool's ``op_shapes`` chunks (a chunk that does
    not parse, e.g. cut by a crash, is skipped)."""
    parts = []
    for chunk in chunks:
        try:
            rows = json.loads(chunk)
            columns = list(zip(*rows, strict=True)) if rows else []
        except (ValueError, TypeError):
            continue
        if len(columns) != len(_ROW):
            continue
        frame = pl.DataFrame(dict(zip(_ROW, columns, strict=True)), strict=False)
        parts.append(frame.with_columns(pl.lit(pid).alias("pid")))
    if not parts:
        return empty_shapes()
    return pl.concat(parts, how="diagonal_relaxed").select(
        [pl.col(c).cast(t, strict=False) for c, t in SHAPE_SCHEMA.items()])


def attach_shapes(calls: pl.DataFrame | None, shapes: pl.DataFrame
                  ) -> tuple[pl.DataFrame | None, dict]:
    """``calls`` with ``op_shapes``/``op_dtypes`` filled (where empty) from the operator running
    on the call's thread when it started, and that operator's name in ``OP_COLUMN`` (for
    ``add_op_layer``); and counts of what matched."""
    if calls is None or shapes.height == 0:
        return calls, {}
    for c in ("op_shapes", "op_dtypes"):
        if c not in calls.columns:
            calls = calls.with_columns(pl.lit(None, pl.String).alias(c))
    keys = calls.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"),
                        pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64),
                        pl.col("ts_ns").cast(pl.Int64)).sort("ts_ns")
    ops = shapes.with_row_index("_op").sort("start_ns")
    hit = (keys.join_asof(ops, left_on="ts_ns", right_on="start_ns", by=["pid", "tid"],
                          strategy="backward", check_sortedness=False)
           .filter(pl.col("ts_ns") <= pl.col("end_ns"))
           .sort("_row"))
    row_of = pl.Series(hit["_row"])
    filled = {c: pl.Series([None] * calls.height, dtype=pl.String).scatter(row_of, hit[c])
              for c in ("op_shapes", "op_dtypes", "op")}
    calls = calls.with_columns([pl.coalesce(pl.col(c), pl.lit(filled[c])).alias(c)
                                for c in ("op_shapes", "op_dtypes")]
                               + [pl.lit(filled["op"]).alias(OP_COLUMN)])
    stats = {"operators_recorded": shapes.height, "calls_given_shapes": hit.height,
             "operators_with_calls": hit["_op"].n_unique() if hit.height else 0,
             "by_operator": {op: n for op, n in hit.group_by("op").len().sort("op").iter_rows()}}
    return calls, stats


def add_op_layer(frames: pl.DataFrame | None, stacks: pl.DataFrame | None, calls: pl.DataFrame
                 ) -> tuple[pl.DataFrame | None, pl.DataFrame | None, pl.DataFrame, int]:
    """The recorded operator as a ``torch_op`` frame in the stacks of the calls it made whose
    stack names no operator, placed below the innermost Python frame (where the native frames
    put it). A call made under the shapes mode reaches torch's kernel through the boxed
    dispatcher, whose native frames do not name the operator. Works per distinct (stack,
    operator): a few hundred paths, not per call. Returns frames, stacks, calls (without
    ``OP_COLUMN``) and how many paths were given the layer."""
    if OP_COLUMN not in calls.columns:
        return frames, stacks, calls, 0
    todo = (calls.filter(pl.col(OP_COLUMN).is_not_null() & pl.col("stack_id").is_not_null())
            .select("stack_id", OP_COLUMN).unique())
    if frames is None or stacks is None or todo.height == 0:
        return frames, stacks, calls.drop(OP_COLUMN), 0
    kind = dict(zip(frames["frame_id"].to_list(), frames["kind"].to_list(), strict=True))
    node = {sid: (parent, fid) for sid, parent, fid in
            stacks.select("stack_id", "parent_id", "frame_id").iter_rows()}
    child = {(parent, fid): sid for sid, (parent, fid) in node.items()}
    op_frame = {n: fid for fid, k, n in frames.select("frame_id", "kind", "name").iter_rows()
                if k == "torch_op"}
    next_frame = int(frames["frame_id"].max() or 0) + 1
    next_stack = int(stacks["stack_id"].max() or 0) + 1
    new_frames, new_stacks, moved = [], [], {}
    for sid, op in todo.iter_rows():
        path = []
        at = sid
        while at is not None and at in node:
            path.append(node[at][1])
            at = node[at][0]
        path.reverse()   # root first
        if any(kind.get(f) == "torch_op" for f in path):
            continue
        py = [i for i, f in enumerate(path) if kind.get(f) == "python"]
        cut = py[-1] + 1 if py else 0
        if op not in op_frame:
            op_frame[op] = next_frame
            new_frames.append((next_frame, "torch_op", op))
            next_frame += 1
        parent = None
        for depth, fid in enumerate([*path[:cut], op_frame[op], *path[cut:]]):
            at = child.get((parent, fid))
            if at is None:
                at = child[(parent, fid)] = next_stack
                node[at] = (parent, fid)
                new_stacks.append((at, parent, fid, depth))
                next_stack += 1
            parent = at
        moved[(sid, op)] = parent
    if new_frames:
        frames = pl.concat([frames, pl.DataFrame(new_frames, schema={
            "frame_id": frames["frame_id"].dtype, "kind": pl.String, "name": pl.String},
            orient="row")], how="diagonal_relaxed")
    if new_stacks:
        stacks = pl.concat([stacks, pl.DataFrame(new_stacks, schema={
            "stack_id": stacks["stack_id"].dtype, "parent_id": stacks["parent_id"].dtype,
            "frame_id": stacks["frame_id"].dtype, "depth": stacks["depth"].dtype},
            orient="row")], how="diagonal_relaxed")
    remap = pl.DataFrame([(s, o, n) for (s, o), n in moved.items()],
                         schema={"stack_id": calls["stack_id"].dtype, OP_COLUMN: pl.String,
                                 "_new": calls["stack_id"].dtype}, orient="row")
    calls = (calls.join(remap, on=["stack_id", OP_COLUMN], how="left", maintain_order="left")
             .with_columns(pl.coalesce("_new", "stack_id").alias("stack_id"))
             .drop("_new", OP_COLUMN))
    return frames, stacks, calls, len(moved)
