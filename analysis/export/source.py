"""What every export reads: the analysis of a capture, its CPU spans and the rule findings.

>>> src = load_export_source("sample_traces/gpt_decode_server.trace.json.gz")  # doctest: +SKIP
>>> src.spans.height, len(src.findings)                                          # doctest: +SKIP
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
from zym.schemas.io import conform

from ..load import load_capture
from ..report import Analysis

Progress = Callable[[str], None]


@dataclass
class ExportSource:
    analysis: Analysis  # the analysis window (steady state unless asked otherwise)
    spans: pl.DataFrame  # span table of the whole capture (pid, tid, ts_ns, dur_ns, stack_id, ...)
    findings: list[dict]  # rule findings as plain dicts (see findings_of), ranked as the CLI ranks
    spans_reconstructed: bool = False  # True when rebuilt from call stacks (eBPF captures)
    found: object = None  # the zym.rules.Findings behind ``findings`` (ranking, savings)
    ranges: pl.DataFrame = field(default_factory=lambda: _conformed("range", pl.DataFrame()))

    @property
    def data(self):
        """The whole capture: a timeline shows everything, the findings come from the window."""
        return self.analysis.whole.data


def load_export_source(path: str | Path, progress: Progress | None = None,
                       with_findings: bool = True, window: str = "steady",
                       budget: int | None = None, budget_given: bool = True,
                       with_spans: bool = True, timeline_only: bool = False) -> ExportSource:
    """Load ``path`` (zym capture or Kineto trace), analyze it (:func:`analyze_data`), and
    gather spans and findings. ``budget``, ``budget_given``: as
    :func:`zym.analysis.report.analyze`'s (a capture past the budget: a sample of it, its
    spans and ranges the sample's). ``with_spans`` False: no timeline (the HTML report): no
    spans nor ranges (every span held is ~50 bytes), and the capture read as ``zym analyze``
    reads it, names as codes and the columns no analysis reads left out (~1.5 GB less at 10 M
    GPU operations). ``timeline_only``: the caller reads only the capture's tables, call
    paths, spans, ranges and the findings' dicts (a Perfetto timeline): the rules' state
    (``found`` is None) and the analysis's derived tables are let go once the findings are
    taken."""
    from ..report import analyze_data, check_window

    path = Path(path)
    if not with_spans:  # (read as the analysis reads it)
        from ..load import UNREAD, api_codes

        data = api_codes(load_capture(path, progress, codes=True, skip=UNREAD, budget=budget,
                                      budget_given=budget_given))
    else:
        data = load_capture(path, progress, budget=budget, budget_given=budget_given)
    check_window(data, window)
    held = data.sample.path if data.sample is not None else path  # (what the tables are of)
    if with_spans:  # (a timeline shows every column of the capture's)
        data.calls = _conformed("call", data.calls)
        data.gpu = _conformed("gpu", data.gpu)
    spans = _spans_of(data, held) if with_spans else _conformed("span", pl.DataFrame())
    if progress:
        progress("attributing GPU work to call paths")
    analysis = analyze_data(data, window)
    reconstructed = False
    if with_spans and spans.height == 0 and data.calls.height:
        spans, reconstructed = spans_from_call_stacks(data.calls, analysis.whole.nodes), True
    found = None
    if with_findings:
        from zym.rules import evaluate

        found = evaluate(analysis, progress=progress)
    findings = findings_of(analysis, found) if found is not None else []
    if timeline_only:
        from zym.schemas.memory import release_freed_memory

        found = None
        analysis.drop_derived()
        # (freed by polars' allocator, kept by it: given back, for the timeline's numpy)
        release_freed_memory(data.calls.height + data.gpu.height)
    # (a sample held in memory has no file: a capture without spans or ranges)
    ranges = (_load_ranges(held) if with_spans and held is not None
              else _conformed("range", pl.DataFrame()))
    return ExportSource(analysis, spans, findings, reconstructed, found, ranges)


def _load_ranges(path: Path) -> pl.DataFrame:
    """The capture's NVTX ranges (none in a Kineto trace)."""
    from zym.schemas.io import is_parquet, open_capture

    ranges = open_capture(path).load("range") if is_parquet(path) else pl.DataFrame()
    return _conformed("range", ranges)


def _conformed(table: str, df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with every column of the capture table (Kineto's in-memory tables omit some)."""
    return conform(table, df).drop("record")


def _spans_of(data, path: Path | None) -> pl.DataFrame:
    """The capture's span table: from ``CaptureData.spans()`` where the loader offers it, else
    read from the file."""
    getter = getattr(data, "spans", None)
    spans = getter() if callable(getter) else None
    if spans is None:
        return _load_spans(path) if path is not None else _conformed("span", pl.DataFrame())
    return _conformed("span", spans)


def _load_spans(path: Path) -> pl.DataFrame:
    from zym.schemas.io import is_parquet, open_capture

    if is_parquet(path):
        spans = open_capture(path).load("span")
    else:
        from zym.capture.kineto import load_kineto

        spans = load_kineto(path)[0].get("span", pl.DataFrame())
    return _conformed("span", spans)


MIN_RUN_CALLS = 2  # a reconstructed span covers at least this many consecutive calls


def spans_from_call_stacks(calls: pl.DataFrame, nodes: pl.DataFrame) -> pl.DataFrame:
    """CPU spans rebuilt from the stacks of consecutive CUDA calls on a thread (eBPF captures).

    A frame is taken to run from the first to the last of an unbroken run of calls whose stacks
    pass through the same trie node (same node: same frame with the same callers). Runs of a
    single call are left out: that frame is already on the call's callstack, and keeping them
    would add one span per frame per call. The call's own API frame is the call's own slice.
    ``nodes``: the stack nodes (:func:`zym.analysis.callpath.stack_nodes`, the call paths'),
    whose ancestors at each depth (:class:`zym.analysis.instances.Ancestors`) give each call's
    node there; work is a few numpy passes per depth over the calls, so memory stays at the
    size of the calls.
    """
    import numpy as np

    from ..instances import Ancestors

    c = (calls.filter(pl.col("stack_id").is_not_null())
         .sort("pid", "tid", "ts_ns", maintain_order=True))
    empty = pl.DataFrame(schema={"pid": pl.Int64, "tid": pl.Int64, "ts_ns": pl.Int64,
                                 "dur_ns": pl.Int64, "stack_id": pl.Int64, "depth": pl.Int32})
    out = []
    if nodes.height and c.height:
        anc = Ancestors(nodes)  # (its rows in the nodes' order)
        api = (nodes["kind"] == "cuda_api").fill_null(False).to_numpy()
        ids = anc.trie.ids
        row = anc.rows(c["stack_id"])  # -1: a stack the capture's table lacks
        pid, tid = c["pid"].to_numpy(), c["tid"].to_numpy()
        ts = c["ts_ns"].to_numpy()
        end = np.r_[ts + c["dur_ns"].to_numpy(), 0]  # (one more: reduceat's last bound)
        same_thread = (pid[1:] == pid[:-1]) & (tid[1:] == tid[:-1])
        for depth in range(anc.table.shape[1]):
            # each stack's node at this depth (none: -1, as for its API frame), then each
            # call's through its stack's row (-1: the extra last entry)
            at = np.r_[np.where(api[anc.table[:, depth]], -1, anc.table[:, depth]), -1]
            node = at[row]
            held = node >= 0
            # a run goes on from one call to the next on its thread through the same node
            on = held[1:] & held[:-1] & (node[1:] == node[:-1]) & same_thread
            first = np.flatnonzero(held & ~np.r_[False, on])
            last = np.flatnonzero(held & ~np.r_[on, False])
            keep = last - first + 1 >= MIN_RUN_CALLS
            first, last = first[keep], last[keep]
            if not len(first):
                continue
            bounds = np.empty(2 * len(first), np.int64)
            bounds[0::2], bounds[1::2] = first, last + 1
            ends = np.maximum.reduceat(end, bounds)[0::2]  # the latest end within each run
            out.append(pl.DataFrame({
                "pid": pid[first], "tid": tid[first], "ts_ns": ts[first],
                "dur_ns": ends - ts[first], "stack_id": ids[node[first]],
                "depth": np.full(len(first), depth, np.int32)}, schema=empty.schema))
    # in time order, and a frame before its callees where they start together: a frame and
    # its callee over the same calls are the same interval, which the timeline nests in row
    # order (with the rows in no set order, the callee was at times drawn as the caller, and
    # two exports of a capture differed)
    spans = (pl.concat(out) if out else empty).sort("pid", "tid", "ts_ns", "depth")
    return _conformed("span", spans.drop("depth"))


def findings_of(analysis: Analysis, found=None) -> list[dict]:
    """The rule engine's findings as dicts (ranked as ``zym analyze`` ranks them), each with
    its occurrences as a polars frame."""
    from zym.rules import evaluate

    from .summary import window_scale

    found = evaluate(analysis) if found is None else found
    window, steps = window_scale(analysis)
    return [finding_dict(f) | f.to_dict(0, window, steps) for f in found]


FINDING_KEYS = ("rule_id", "severity", "title", "message", "site", "site_id", "user_chain",
                "evidence", "fix", "cost_ns", "pack", "saving_ns", "saving_how")
OCCURRENCE_SCHEMA = {c: pl.Int64 for c in ("pid", "tid", "ts_ns", "dur_ns", "correlation_id")}


def finding_dict(f) -> dict:
    """A finding (``zym.rules.Finding`` or a dict of the same keys) as a dict whose
    ``occurrences`` is a polars frame (``pid, tid, ts_ns, dur_ns, correlation_id``)."""
    if isinstance(f, dict):
        d = {k: f.get(k) for k in FINDING_KEYS}
        occ = f.get("occurrences") or []
        frame = (occ if isinstance(occ, pl.DataFrame)
                 else pl.DataFrame(occ, schema=OCCURRENCE_SCHEMA) if occ
                 else pl.DataFrame(schema=OCCURRENCE_SCHEMA))
    else:
        d = {k: getattr(f, k, None) for k in FINDING_KEYS}
        frame = getattr(f, "occurrence_frame", None)
        if frame is None:
            frame = pl.DataFrame(list(getattr(f, "occurrences", []) or []), schema=OCCURRENCE_SCHEMA)
    d["occurrences"] = frame.select(
        [pl.col(c).cast(t) if c in frame.columns else pl.lit(None, t).alias(c)
         for c, t in OCCURRENCE_SCHEMA.items()])
    return d
