"""A capture reduced to what a comparison needs: its **profile** (:func:`profile_of`).

Built from the facts of the analysis window (:class:`zym.analysis.Analysis`): per *code site*
(a user line with its torch ops and Python built-in, :func:`zym.analysis.sites.site_table`)
and per GPU operation name, the GPU time, CPU time blocked, CUDA calls, launches, syncs,
copies and bytes copied, each summed over the window and over each **unit** of it:

* a **step** where the capture repeats one (:mod:`zym.analysis.phases`);
* else one of :data:`SLICES` equal slices of the window.

The sums of squares per unit give each measure's spread from unit to unit, which
:mod:`zym.analysis.diff` turns into noise thresholds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from .callpath import UNKNOWN_STACK
from .load import cut_short
from .trie import Trie

if TYPE_CHECKING:
    from .report import Analysis

SLICES = 10  # units of a capture without steps: equal slices of its window
# The measures per site, per kernel and in total; with their units.
SITE_MEASURES: dict[str, str] = {
    "gpu_ns": "ns", "cpu_blocked_ns": "ns", "calls": "count", "launches": "count",
    "syncs": "count", "kernels": "count", "copies": "count", "memsets": "count",
    "bytes_htod": "bytes", "bytes_dtoh": "bytes", "bytes_dtod": "bytes",
}
TOTAL_MEASURES: dict[str, str] = {"wall_ns": "ns"} | SITE_MEASURES
KERNEL_MEASURES: dict[str, str] = {"gpu_ns": "ns", "count": "count", "bytes": "bytes"}
# What identifies a code site across captures (zym.analysis.diff.match_sites).
KEY_COLUMNS = ("file", "line", "function", "module", "op_chain", "py_api", "source", "callers")


@dataclass
class Profile:
    """One capture reduced to what a comparison needs (see the module doc).

    ``sites``: one row per code site (``code_site``; -1 for GPU work whose launching call was
    not captured) with its identity (:data:`KEY_COLUMNS`), ``site`` (its label) and, per
    measure of :data:`SITE_MEASURES`, the window's total and the sum of squares over units
    (``{m}__ss``); ``kernels``: the same per GPU operation (``name``, ``kind``); ``units``:
    per unit, every total measure; ``findings``: rule findings as dicts with ``code_site``.
    """

    source: str
    producer: str | None
    unit: str  # "step" or "slice"
    unit_count: int
    window_ns: int
    steps_function: str | None
    sites: pl.DataFrame
    kernels: pl.DataFrame
    units: pl.DataFrame
    findings: list[dict] = field(default_factory=list)
    # how the capture was sampled to fit the memory budget (``Sample.to_dict``), or None
    sample: dict | None = None
    # where its trace was cut short (:func:`zym.analysis.load.cut_short`), or None
    cut_short: dict | None = None

    def describe(self) -> dict:
        sampled = {"sample": self.sample} if self.sample is not None else {}
        cut = {"cut_short": self.cut_short} if self.cut_short is not None else {}
        return {"source": self.source, "producer": self.producer, "unit": self.unit,
                "units": self.unit_count, "window_ns": self.window_ns,
                "steps_function": self.steps_function} | sampled | cut


# -- one capture -------------------------------------------------------------------------------

def unit_bounds(analysis: Analysis) -> tuple[str, np.ndarray, np.ndarray, str | None]:
    """``(unit, starts, ends, step function)``: the steps in the window, else SLICES slices."""
    steps = analysis.steps_in_window()
    if steps is not None and steps.count >= 2:
        return "step", steps.start_ns.astype(np.int64), steps.end_ns.astype(np.int64), \
            analysis.phases.steps.function
    lo, hi = analysis.window
    edges = lo + (np.arange(SLICES + 1, dtype=np.int64) * max(hi - lo, 1)) // SLICES
    return "slice", edges[:-1], edges[1:], None


def unit_of(ts: pl.Series, starts: np.ndarray) -> pl.Series:
    """The unit each timestamp falls in (before the first: the first)."""
    idx = pl.Series(starts).search_sorted(ts, side="right").cast(pl.Int64) - 1
    return idx.clip(0, len(starts) - 1).alias("unit")


def profile_of(analysis: Analysis, findings: list[dict] | None = None) -> Profile:
    """The profile of an analysis window; ``findings`` as :meth:`Finding.to_dict` gives them
    (with ``site_id``), ranked."""
    facts = analysis.facts
    unit, starts, ends, step_fn = unit_bounds(analysis)
    calls = facts.calls
    (code_site,) = facts.site_of(calls["stack_id"], ("code_site",))
    c = calls.lazy().select(
        code_site.fill_null(UNKNOWN_STACK).alias("code_site"), unit_of(calls["ts_ns"], starts),
        pl.lit(1, pl.Int64).alias("calls"),
        (pl.col("kind") == "launch").cast(pl.Int64).alias("launches"),
        (pl.col("kind") == "sync").cast(pl.Int64).alias("syncs"),
        pl.when("blocking").then("dur_ns").otherwise(0).cast(pl.Int64).alias("cpu_blocked_ns"))
    gpu = facts.gpu.filter("work")
    launched_at = calls["ts_ns"].gather(gpu["call_idx"])
    (gsite,) = facts.site_of(gpu["stack_id"].fill_null(UNKNOWN_STACK), ("code_site",))
    kind, direction = pl.col("kind"), pl.col("copy_kind")
    size = pl.col("size_bytes").fill_null(0).cast(pl.Int64)
    g = gpu.lazy().select(
        gsite.fill_null(UNKNOWN_STACK).alias("code_site"),
        unit_of(pl.coalesce(launched_at, gpu["ts_ns"]), starts),
        pl.col("name").cast(pl.String), pl.col("kind").cast(pl.String),
        pl.col("dur_ns").cast(pl.Int64).alias("gpu_ns"),
        *[(kind == k).cast(pl.Int64).alias(n) for k, n in (
            ("kernel", "kernels"), ("copy", "copies"), ("memset", "memsets"))],
        *[pl.when((kind == "copy") & (direction == d)).then(size).otherwise(0)
          .alias(f"bytes_{d.lower()}") for d in ("HtoD", "DtoH", "DtoD")],
        pl.when(kind == "copy").then(size).otherwise(0).alias("bytes"))
    call_cols = ["calls", "launches", "syncs", "cpu_blocked_ns"]
    gpu_cols = [m for m in SITE_MEASURES if m not in call_cols]
    # One query for the three tables (the per-site-and-unit sums computed once).
    per_site_unit = (
        pl.concat([c.group_by("code_site", "unit").agg(pl.col(call_cols).sum()),
                   g.group_by("code_site", "unit").agg(pl.col(gpu_cols).sum())],
                  how="diagonal")
        .group_by("code_site", "unit").agg(pl.col(list(SITE_MEASURES)).fill_null(0).sum()))
    sites = _moments(per_site_unit, ["code_site"], list(SITE_MEASURES))
    kernels = _moments(
        g.group_by("name", "kind", "unit").agg(pl.col("gpu_ns").sum(), pl.len().alias("count"),
                                               pl.col("bytes").sum()),
        ["name", "kind"], list(KERNEL_MEASURES))
    units = (per_site_unit.group_by("unit").agg(pl.col(list(SITE_MEASURES)).sum())
             .join(pl.LazyFrame({"unit": np.arange(len(starts), dtype=np.int64)}), on="unit",
                   how="right").fill_null(0)
             .with_columns(pl.Series("wall_ns", (ends - starts).astype(np.int64))).sort("unit"))
    sites, kernels, units = pl.collect_all([sites, kernels, units])
    sites = sites.join(site_identity(analysis), on="code_site", how="left")
    meta = analysis.data.meta
    return Profile(
        source=str(analysis.data.source), producer=meta.producer, unit=unit,
        unit_count=len(starts), window_ns=int(analysis.facts.window_ns), steps_function=step_fn,
        sites=sites, kernels=kernels, units=units,
        findings=_findings_with_sites(findings or [], facts.sites),
        sample=analysis.sample_facts(), cut_short=cut_short(meta))


def _moments(df: pl.LazyFrame, keys: list[str], measures: list[str]) -> pl.LazyFrame:
    """Per key: each measure's total over the units and its sum of squares (units with no
    row count as zero), for the mean and spread per unit. The measures are integers (ns,
    counts, bytes): the squares are summed exactly, as 128-bit integers, and rounded once. A
    sum of float squares depended on the order polars' parallel group-by met the rows (its
    last digits, and a diff's thresholds, varied from run to run, also with the rows sorted
    first)."""
    def square(m: str) -> pl.Expr:
        v = pl.col(m).cast(pl.Int128)
        return v * v

    return df.sort([*keys, "unit"]).group_by(keys, maintain_order=True).agg(
        *[pl.col(m).sum().cast(pl.Float64).alias(m) for m in measures],
        *[square(m).sum().cast(pl.Float64).alias(f"{m}__ss") for m in measures])


def site_identity(analysis: Analysis) -> pl.DataFrame:
    """Per code site: what identifies it across captures (:data:`KEY_COLUMNS`) and its label.

    ``file`` is the short file name (as users read it: two checkouts in different folders give
    the same names); ``callers`` the user frames above the site (``file function``, outermost
    first) on its costliest stack, without lines, so a site keeps its identity when an edit
    elsewhere moves its line."""
    facts = analysis.facts
    paths = analysis.call_paths.paths.select(
        pl.col("path_id").alias("stack_id"), (pl.col("gpu_ns") + pl.col("cpu_blocked_ns"))
        .alias("_cost"))
    s = (facts.sites.join(paths, on="stack_id", how="left")
         .sort("_cost", "stack_id", descending=[True, False], nulls_last=True)
         .unique("code_site", keep="first", maintain_order=True))
    short = dict(zip(facts.sites["user_file"].to_list(), facts.sites["user_short_file"].to_list()))
    callers = _callers(facts.nodes, s["stack_id"], short)
    ident = s.select(
        "code_site", pl.col("user_short_file").alias("file"), pl.col("user_line").alias("line"),
        pl.col("user_function").alias("function"), pl.col("user_module").alias("module"),
        "op_chain", "py_api", pl.col("user_source").alias("source"), "site",
        pl.col("mechanism"), pl.col("torch_op")).with_columns(pl.Series("callers", callers))
    unknown = pl.DataFrame({"code_site": [UNKNOWN_STACK], "site": ["(unknown stack)"],
                            "op_chain": ["(unknown stack)"]})
    return pl.concat([ident, unknown], how="diagonal_relaxed")


def _callers(nodes: pl.DataFrame, stacks: pl.Series, short: dict[str, str]) -> list[str]:
    """For each stack, the user frames above its innermost one, as ``file function`` joined
    by ``>``, outermost first."""
    trie = Trie.of(nodes)
    user = nodes["is_user"].fill_null(False).to_list()
    files, names = nodes["file"].to_list(), nodes["name"].to_list()
    out = []
    for path in trie.paths(trie.rows_of(stacks.cast(pl.Int64).to_numpy())):
        frames = [r for r in path if user[r]][:-1]
        out.append(">".join(f"{short.get(files[r], files[r])} {names[r]}" for r in frames))
    return out


def _findings_with_sites(findings: list[dict], sites: pl.DataFrame) -> list[dict]:
    """Each finding with the code site of its ``site_id`` (None for window-wide findings)."""
    code = dict(zip(sites["stack_id"].to_list(), sites["code_site"].to_list()))
    return [f | {"code_site": code.get(f.get("site_id"))} for f in findings]
