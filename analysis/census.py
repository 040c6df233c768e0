"""Every line of a capture that syncs or copies, counted over the whole capture.

A capture analysed on a sample of its time (:mod:`zym.analysis.budget`) names only the lines
its slices hold: a line that syncs or copies once every few hundred steps can lie outside
every slice, and the report would never name it. The census counts, per stack, the calls
that wait for the GPU (a sync, or a call that blocks by its API:
:func:`zym.schemas.apis.is_blocking_api`; a copy is counted as a copy) and the copies, from the
capture's file in one pass over four columns of its calls, a part of its time at a time
(grouped by stack, API name and kind before anything is tested: the names are few, the calls
millions), so its memory is a part's, not the capture's. The analysis of the sample gives each
stack its line (:meth:`zym.analysis.facts.Facts.site_of`: the sample holds every stack of the
capture) and says which of the capture's lines its sample does not hold
(:func:`sync_copy_lines`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl
from zym.schemas.apis import is_blocking_api
from zym.schemas.tables import polars_schema

from .sites import NO_USER_FRAME

if TYPE_CHECKING:
    from zym.schemas.io import Capture

    from .facts import Facts

COUNTS = ("syncs", "sync_ns", "copies", "copy_ns")


def _grouped(cap: Capture | pl.DataFrame, table: str, keys: list[str],
             measures: list[pl.Expr], codes: tuple[str, ...]) -> pl.DataFrame:
    """``measures`` of ``cap``'s ``table`` per ``keys`` (sums and counts), a part of its
    time at a time (:meth:`zym.schemas.io.Capture.runs`), the parts' sums added: memory of a
    part and of the groups, whatever the capture's size (polars' streaming engine held 0.5 GB
    of read-ahead at 10 M calls); or of the rows ``cap`` (a sample held in memory)."""
    columns = keys + sorted({c for m in measures for c in m.meta.root_names()} - set(keys))
    runs = [cap.lazy()] if isinstance(cap, pl.DataFrame) else cap.runs(table, codes)
    parts = [part.select(columns).group_by(keys).agg(measures).collect() for part in runs]
    if not parts:
        types = polars_schema(table)
        return pl.DataFrame(schema={**{k: pl.String if k in codes else types[k] for k in keys},
                                    **{m.meta.output_name(): pl.Int64 for m in measures}})
    names = [m.meta.output_name() for m in measures]
    return (pl.concat(parts).group_by(keys).agg(pl.col(n).sum() for n in names)
            .with_columns(pl.col(c).cast(pl.String) for c in codes if c in keys))


def sync_copy_census(cap: Capture | pl.DataFrame) -> pl.DataFrame:
    """Per stack (``stack_id``) of ``cap``'s calls (or the calls ``cap``) that sync or copy:
    ``syncs`` (calls that wait for the GPU, copies apart) and ``sync_ns`` (their time),
    ``copies`` and ``copy_ns``."""
    per = _grouped(cap, "call", ["stack_id", "name", "kind"],
                   [pl.len().alias("n"), pl.col("dur_ns").fill_null(0).sum().alias("ns")],
                   ("name", "kind"))
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
    operations, how many times the capture ran it (``launches``), in one pass over five
    columns: whether a step that a sample holds once repeats elsewhere in the capture
    (:func:`zym.rules.savings.repeating_steps`)."""
    per = _grouped(cap, "gpu", ["name", "kind", "grid_x", "grid_y", "grid_z"],
                   [pl.len().alias("launches")], ("name", "kind"))
    return (per.filter(pl.col("kind") == "kernel").drop("kind")
            .with_columns(pl.col("launches").cast(pl.Int64)))


def by_line(facts: Facts, census: pl.DataFrame) -> pl.DataFrame:
    """``census`` per line (``site``: ``file:line function`` of the stack's user frame, as the
    analysis labels it), with the line's ``file``, ``line`` and ``function``; the costliest
    first (time in syncs and copies together)."""
    site, file, line, function = facts.site_of(
        census["stack_id"], ("site", "user_file", "user_line", "user_function"))
    return (census.with_columns(site.fill_null(NO_USER_FRAME), file.alias("file"), line.alias("line"),
                                function.alias("function"))
            .group_by("site", "file", "line", "function")
            .agg(pl.col(c).sum() for c in COUNTS)
            .sort(pl.col("sync_ns") + pl.col("copy_ns"), "site", descending=[True, False]))


# A line the sample holds is said to be held short where the share of the capture's time its
# syncs and copies take is at least this many times their share of the sample's time, and
# larger by at least MIN_GAP of the capture's time (a sample's own spread is not named).
SHORT = 2.0
MIN_GAP = 0.001


def sync_copy_lines(facts: Facts, capture: pl.DataFrame, sample: pl.DataFrame,
                  capture_ns: int, sample_ns: int) -> dict:
    """What the report says of the lines that sync or copy in a sampled capture: how many the
    capture has (``capture``: its census) and its sample holds (``sample``: the sample's);
    each line the sample does not hold, with the capture's counts (``outside``); each line it
    holds short (``short``: see :data:`SHORT`), with the capture's counts and the sample's
    (``sample_syncs``, ``sample_copies``, ``sample_ns``); and how long the capture and the
    sample are (``capture_ns``: the extent of the capture's calls, ``sample_ns``: the
    slices' time together), what their times are shares of."""
    whole, held = by_line(facts, capture), by_line(facts, sample)
    outside = whole.join(held.select("site"), on="site", how="anti", maintain_order="left")
    theirs = held.select("site", pl.col("syncs").alias("sample_syncs"),
                         pl.col("copies").alias("sample_copies"),
                         (pl.col("sync_ns") + pl.col("copy_ns")).alias("sample_ns"))
    share = (pl.col("sync_ns") + pl.col("copy_ns")) / max(capture_ns, 1)
    in_sample = pl.col("sample_ns") / max(sample_ns, 1)
    short = (whole.join(theirs, on="site", how="inner", maintain_order="left")
             .filter((share >= SHORT * in_sample) & (share - in_sample >= MIN_GAP)))
    return {"capture": whole.height, "sample": held.height, "capture_ns": capture_ns,
            "sample_ns": sample_ns, "outside": outside.to_dicts(), "short": short.to_dicts()}
