"""``zym analyze --what-if SPEC``: replay the analysis window with chosen fixes applied and say
what they would save, alone and together (one replay with all of them: nothing counted twice).

A SPEC names a finding's fix, or a fix model and the events it applies to:

==========================  =====================================================================
``3`` or ``#3``             the fix of finding 3 (as ranked in the report)
``all``                     every finding's fix
``RULE_ID[@TEXT]``          the fix of each finding of that rule (whose site contains TEXT)
``MODEL@FILE:LINE``         ``batch``, ``remove``, ``unblock``, ``pin``, ``async`` or
                            ``shorten-gaps`` (:mod:`zym.rules.savings`) on the copies, memsets and
                            syncs made at that line (FILE may be a suffix: ``serve.py:87``)
``speedup@REGEX=4x``        kernels whose name matches REGEX run 4 times faster
``speedup@REGEX=tf32``      ... run in tf32 (or fp16, bf16): from the GPU's rates
``cuda-graph@steps``        every step's runs of launches replayed as CUDA graphs
==========================  =====================================================================
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

import polars as pl
from zym.analysis.replay import Fix
from zym.schemas.errors import InputError
from zym.schemas.lookup import distinct_text

from .savings import NoEstimate, fix_for

if TYPE_CHECKING:
    from zym.analysis import Analysis

    from .findings import Findings

CALL_MODELS = ("batch", "remove", "unblock", "pin", "async", "shorten-gaps")
GRAMMAR = ("N, all, RULE_ID[@TEXT], MODEL@FILE:LINE (MODEL: " + ", ".join(CALL_MODELS)
           + "), speedup@REGEX=Fx|tf32|fp16|bf16, cuda-graph@steps")


def what_if(analysis: Analysis, findings: Findings, specs: list[str]) -> dict:
    """Each spec's saving alone, and all of them together."""
    tl = analysis.timeline
    if not tl.usable:
        raise InputError("--what-if: this capture has no GPU side to replay against (capture "
                         "with CUPTI: sudo zym capture, not --pid)")
    rows, edits = [], []
    for spec in specs:
        fix = resolve(analysis, findings, spec)
        edits.append(fix)
        rows.append({"spec": spec, "saving_ns": tl.saving(fix), "how": fix.describe})
    total = tl.saving(Fix.combine(edits)) if edits else 0
    window = analysis.facts.window_ns
    steps = analysis.steps_in_window()
    n = steps.count if steps is not None else 0
    return {"specs": rows, "saving_ns": total,
            "saving_pct_of_window": round(100 * total / window, 2) if window else None,
            "saving_per_step_ns": total // n if n else None, "window_ns": window}


def resolve(analysis: Analysis, findings: Findings, spec: str) -> Fix:
    """The timeline edit a spec names (see the module doc)."""
    s = spec.strip()
    if s == "all" or re.fullmatch(r"#?\d+", s):
        chosen = ([f for f in findings if f.edit is not None] if s == "all"
                  else [_nth(findings, int(s.lstrip("#")), spec)])
        return _edits(chosen, spec)
    model, at, where = s.partition("@")
    if model in CALL_MODELS and at:
        return _on_calls(analysis, model, where, spec)
    if model == "speedup" and at:
        return _speedup(analysis, where, spec)
    if model == "cuda-graph" and where in ("steps", ""):
        return _call(fix_for, {"model": "cuda-graph"}, "steps",
                     _all_steps(analysis), analysis, spec)
    matched = [f for f in findings if f.rule_id == model and (not at or where in f.site)]
    if matched:
        return _edits(matched, spec)
    raise InputError(f"--what-if {spec}: not a finding number, rule id with findings here, or "
                     f"fix ({GRAMMAR})")


def _nth(findings: Findings, n: int, spec: str):
    if not 1 <= n <= len(findings):
        raise InputError(f"--what-if {spec}: there are {len(findings)} findings")
    return findings[n - 1]


def _edits(chosen: list, spec: str) -> Fix:
    edits = [f.edit for f in chosen if f.edit is not None]
    if not edits:
        raise InputError(f"--what-if {spec}: no estimate for this finding ("
                         f"{chosen[0].saving_how if chosen else 'none matched'})")
    return Fix.combine(edits)


def _call(fn, model: dict, relation: str, rows: pl.DataFrame, analysis: Analysis,
          spec: str, measures: dict | None = None) -> Fix:
    try:
        fix = fn(model, relation, rows, analysis, measures or {})
    except NoEstimate as why:
        raise InputError(f"--what-if {spec}: {why}") from None
    if fix is None or fix.is_empty():
        raise InputError(f"--what-if {spec}: nothing to change")
    return fix


def _on_calls(analysis: Analysis, model: str, where: str, spec: str) -> Fix:
    m = re.fullmatch(r"(.+):(\d+)", where)
    if not m:
        raise InputError(f"--what-if {spec}: {model}@FILE:LINE, e.g. {model}@serve.py:87")
    file, line = m.group(1), int(m.group(2))
    rel = analysis.relations
    calls = rel.materialize("calls", {"call_idx", "kind", "call_instance", "ts_ns", "stack_id"})
    sites = analysis.facts.sites.filter(
        (pl.col("user_line") == line) & pl.col("user_file").str.ends_with(file))
    rows = calls.filter(pl.col("stack_id").is_in(sites["stack_id"].implode())
                        & (pl.col("kind") != "launch"))
    if rows.height == 0:
        raise InputError(f"--what-if {spec}: no copy, memset or sync made at {file}:{line} in "
                         "the window")
    if model == "shorten-gaps":
        rows = calls.filter(pl.col("stack_id").is_in(sites["stack_id"].implode()))
    return _call(fix_for, {"model": model}, "calls", rows, analysis, spec)


def _speedup(analysis: Analysis, where: str, spec: str) -> Fix:
    regex, eq, how = where.rpartition("=")
    if not eq or not regex:
        raise InputError(f"--what-if {spec}: speedup@REGEX=4x or speedup@REGEX=tf32")
    gpu = analysis.facts.gpu
    names = distinct_text(gpu["name"])  # matched once per name
    try:
        matched = names.filter(names.str.contains(regex))
    except pl.exceptions.PolarsError:
        raise InputError(f"--what-if {spec}: {regex!r} is not a regular expression") from None
    hit = gpu.filter(pl.col("work") & pl.col("name").is_in(matched.implode()))
    if hit.height == 0:
        raise InputError(f"--what-if {spec}: no kernel name matches {regex!r} in the window")
    rows = hit.select("gpu_idx", "dur_ns", "precision")
    factor = re.fullmatch(r"([0-9]*\.?[0-9]+)x", how)
    if factor:
        return _call(fix_for, {"model": "speedup", "factor": "factor"}, "gpu", rows, analysis,
                     spec, {"factor": float(factor.group(1))})
    if how in ("tf32", "fp16", "bf16", "fp8"):
        return _call(fix_for, {"model": "speedup", "to": how}, "gpu", rows, analysis, spec)
    raise InputError(f"--what-if {spec}: {how!r} is neither a factor (4x) nor a precision")


def _all_steps(analysis: Analysis) -> pl.DataFrame:
    steps = analysis.steps_in_window()
    if steps is None:
        raise InputError("--what-if cuda-graph@steps: this capture has no repeated steps")
    return pl.DataFrame({"step": pl.int_range(steps.count, eager=True).cast(pl.Int64)})
