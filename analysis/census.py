"""Every line of a capture that syncs or copies, counted over the whole capture.

A capture analysed on a sample of its time (:mod:`zym.analysis.budget`) names only the lines
its slices hold: a line that syncs or copies once every few hundred steps can lie outside
every slice, and the report would never name it. The census counts, per stack, the calls
that wait for the GPU (a sync, or a call that blocks by its API:
:func:`zym.schemas.apis.is_blocking_api`; a copy is counted as a copy) and the copies, from the
capture's file in one streaming pass over four columns of its calls (grouped by stack, API name
and kind before anything is tested: the names are few, the calls millions), so its memory is the
pass's, not the capture's. The analysis of the sample gives each stack its line
(:meth:`zym.analysis.facts.Facts.site_of`: the sample holds every stack of the capture) and says
which of the capture's lines its sample does not hold (:func:`lines_outside`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl
from zym.schemas.apis import is_blocking_api

if TYPE_CHECKING:
    from zym.schemas.io import Capture

    from .facts import Facts

COUNTS = ("syncs", "sync_ns", "copies", "copy_ns")
NO_LINE = "(no user frame)"


def sync_copy_census(cap: Capture) -> pl.DataFrame:
    """Per stack (``stack_id``) of ``cap``'s calls that sync or copy: ``syncs`` (calls that wait
    for the GPU, copies apart) and ``sync_ns`` (their time), ``copies`` and ``copy_ns``."""
    per = (cap.scan("call", codes=("name", "kind")).select("stack_id", "name", "kind", "dur_ns")
           .group_by("stack_id", "name", "kind")
           .agg(pl.len().alias("n"), pl.col("dur_ns").fill_null(0).sum().alias("ns"))
           .collect(engine="streaming")
           .with_columns(pl.col("name").cast(pl.String), pl.col("kind").cast(pl.String)))
    copy = (pl.col("kind") == "copy").fill_null(False)
    sync = ~copy & (is_blocking_api(pl.col("name")) | (pl.col("kind") == "sync")).fill_null(False)
    return (per.filter(sync | copy).group_by("stack_id")
            .agg(pl.col("n").filter(sync).sum().alias("syncs"),
                 pl.col("ns").filter(sync).sum().alias("sync_ns"),
                 pl.col("n").filter(copy).sum().alias("copies"),
                 pl.col("ns").filter(copy).sum().alias("copy_ns"))
            .with_columns(pl.col(c).cast(pl.Int64) for c in COUNTS).sort("stack_id"))


def launch_census(cap: Capture) -> pl.DataFrame:
    """Per kernel and grid (``name``, ``grid_x``, ``grid_y``, ``grid_z``) of ``cap``'s GPU
    operations, how many times the capture ran it (``launches``), in one streaming pass over
    five columns: whether a step that a sample holds once repeats elsewhere in the capture
    (:func:`zym.rules.savings.repeating_steps`)."""
    return (cap.scan("gpu", codes=("name", "kind"))
            .select("name", "kind", "grid_x", "grid_y", "grid_z")
            .filter(pl.col("kind") == "kernel")
            .group_by("name", "grid_x", "grid_y", "grid_z").agg(pl.len().alias("launches"))
            .collect(engine="streaming")
            .with_columns(pl.col("name").cast(pl.String), pl.col("launches").cast(pl.Int64)))


def by_line(facts: Facts, census: pl.DataFrame) -> pl.DataFrame:
    """``census`` per line (``site``: ``file:line function`` of the stack's user frame, as the
    analysis labels it), with the line's ``file``, ``line`` and ``function``; the costliest
    first (time in syncs and copies together)."""
    site, file, line, function = facts.site_of(
        census["stack_id"], ("site", "user_file", "user_line", "user_function"))
    return (census.with_columns(site.fill_null(NO_LINE), file.alias("file"), line.alias("line"),
                                function.alias("function"))
            .group_by("site", "file", "line", "function")
            .agg(pl.col(c).sum() for c in COUNTS)
            .sort(pl.col("sync_ns") + pl.col("copy_ns"), "site", descending=[True, False]))


def lines_outside(facts: Facts, capture: pl.DataFrame, sample: pl.DataFrame,
                  capture_ns: int) -> dict:
    """What the report says of the lines that sync or copy in a sampled capture: how many the
    capture has (``capture``: its census) and its sample holds (``sample``: the sample's), and
    each line the sample does not hold, with the capture's counts (``outside``); and how long
    the capture is (``capture_ns``: its calls' and GPU work's extent), what their times are
    shares of."""
    whole, held = by_line(facts, capture), by_line(facts, sample)
    outside = whole.join(held.select("site"), on="site", how="anti", maintain_order="left")
    return {"capture": whole.height, "sample": held.height, "capture_ns": capture_ns,
            "outside": outside.to_dicts()}
