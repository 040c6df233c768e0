"""A finding: one rule firing on one group (usually one call site) of a capture, with what
fixing it would save; :class:`Findings`: all of them, ranked, with the total of all fixes."""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

if TYPE_CHECKING:
    from zym.analysis import Analysis
    from zym.analysis.replay import Fix

OCCURRENCE_COLUMNS = ("pid", "tid", "ts_ns", "dur_ns", "correlation_id")
# Fixes replayed together: a thread takes a run of at least this many (each run starts with
# one replay of every fix before it combined: a cost worth it only over several).
MIN_RUN = 8
# Findings whose fix is replayed with those ranked above it, one replay each: past these, the
# fixes ranked lower are replayed together once (what they add as one). Each chained replay
# costs about as much as the edits of every fix above it: on a capture with thousands of
# call sites (4,045 fixes) the whole chain took ~80 s of a ~2 min analysis.
CHAIN = 200


# The costliest occurrences first: longest, then earliest; the other columns only order
# events alike in both (so that examples do not depend on how they were picked).
_EXAMPLE_ORDER = ("dur_ns", "ts_ns", "pid", "tid", "correlation_id")
_EXAMPLE_DESCENDING = [True, False, False, False, False]


def top_examples(occurrences: pl.DataFrame, n: int) -> list[dict]:
    """The ``n`` costliest of one finding's ``occurrences``. Lazy: polars then keeps the
    ``n`` first rows as it sorts (a whole sort took 2.0-2.3 s of 5 M occurrences, the lazy
    one 17-26 ms, in process)."""
    return (occurrences.lazy()
            .sort(_EXAMPLE_ORDER, descending=_EXAMPLE_DESCENDING, nulls_last=True)
            .head(n).select(list(OCCURRENCE_COLUMNS)).collect().to_dicts())


def top_examples_by_group(occurrences: pl.DataFrame, n: int) -> dict[int, list[dict]]:
    """``top_examples`` of each group of ``occurrences`` (its ``group`` column, an index),
    in one pass: a partial selection per group (``top_k_by``), then the few kept sorted. One
    query instead of one per finding (7,848 findings: ~6 s of ~0.8 ms queries)."""
    if occurrences.height == 0:
        return {}
    cols = list(OCCURRENCE_COLUMNS)
    kept = (occurrences.lazy().group_by("group").agg(
        pl.struct(cols).top_k_by(list(_EXAMPLE_ORDER), k=n,
                                 reverse=[not d for d in _EXAMPLE_DESCENDING]).alias("_e"))
        .explode("_e").unnest("_e")
        .sort(["group", *_EXAMPLE_ORDER], descending=[False, *_EXAMPLE_DESCENDING],
              nulls_last=True).collect())
    out: dict[int, list[dict]] = {}
    for row in kept.iter_rows(named=True):
        out.setdefault(row.pop("group"), []).append(row)
    return out


@dataclass
class Finding:
    """What is wrong, where, what it costs, what fixing it saves and how to fix it.

    ``cost_ns`` is what was observed (CPU time blocked, GPU time, GPU idle time);
    ``saving_ns`` what the window would lose if the fix were applied, from replaying the
    capture with it (:mod:`zym.rules.savings`; None when the rule's model makes no estimate),
    and ``saving_how`` how that was estimated.

    ``occurrences`` lists every offending event as ``{pid, tid, ts_ns, dur_ns,
    correlation_id}`` (CPU call times for call and kernel rules; the gap or window for
    utilization rules); ``occurrence_frame`` is the same as a polars frame. Both are built on
    first access (for all findings of a rule at once), so findings with millions of events
    cost nothing until an exporter asks.
    """

    rule_id: str
    severity: str  # "info" | "warning" | "error"
    title: str
    message: str
    site: str  # "file:line function", or a description when the finding has no line
    user_chain: list[str]  # user frames from the outermost down to the site
    evidence: dict[str, Any]
    fix: str
    cost_ns: int = 0  # the observed cost: CPU stall, GPU time or GPU idle
    pack: str = ""
    site_id: int | None = None  # stack node of the site (joins the call-path graph)
    occurrence_count: int = 0
    group_key: tuple = ()  # the rule's group: ((column, value), ...), e.g. the code site
    saving_model: dict = field(default_factory=lambda: {"model": "none"})
    relation: str = ""
    measures: dict = field(default_factory=dict, repr=False)
    source: str | None = None  # the source text of the site's line, where the capture has it
    # a site inside an installed package: the user's own line above it (analysis.sites)
    called_from: str | None = None
    saving_ns: int | None = None
    saving_how: str = ""
    saving_incremental_ns: int | None = None
    # where the fixes were replayed on two halves (a long window's sample, or a capture's
    # sample: zym.analysis.sample), the saving as each half alone gives it, scaled alike
    saving_halves_ns: tuple[int, int] | None = None
    # the second fix the rule offers (its saving model's ``instead``), estimated the same way
    # from the same events: ``label``, ``saving_ns``, ``saving_how`` (None: the rule offers none)
    saving_instead: dict | None = None
    also: list[str] = field(default_factory=list)  # other rules whose fix is the same edit
    # Builds this finding's occurrences on first use (exports ask; text reports never do).
    occurrence_source: Callable[[], pl.DataFrame] | None = field(default=None, repr=False)
    event_source: Callable[[], pl.DataFrame] | None = field(default=None, repr=False)
    # The ``n`` costliest occurrences, from the rule's findings together (``examples``).
    example_source: Callable[[int], list[dict]] | None = field(default=None, repr=False)
    # Drops what ``event_source`` holds beyond the occurrences (after the estimates).
    release_events: Callable[[], None] | None = field(default=None, repr=False)
    edit: Fix | None = field(default=None, repr=False)
    edit_instead: Fix | None = field(default=None, repr=False)  # the second fix's edit
    _frame: pl.DataFrame | None = field(default=None, repr=False)
    _occurrences: list[dict] | None = field(default=None, repr=False)

    @property
    def occurrence_frame(self) -> pl.DataFrame:
        """Every offending event: ``pid, tid, ts_ns, dur_ns, correlation_id`` (polars)."""
        if self._frame is None:
            self._frame = (self.occurrence_source() if self.occurrence_source is not None
                           else pl.DataFrame(schema={c: pl.Int64 for c in OCCURRENCE_COLUMNS}))
        return self._frame

    @property
    def occurrences(self) -> list[dict]:
        if self._occurrences is None:
            self._occurrences = self.occurrence_frame[list(OCCURRENCE_COLUMNS)].to_dicts()
        return self._occurrences

    def examples(self, n: int = 5) -> list[dict]:
        """The ``n`` costliest occurrences (``top_examples``), for reports: from
        ``example_source`` where the rule computes them for all its findings at once."""
        if self.example_source is not None:
            return self.example_source(n)
        return top_examples(self.occurrence_frame, n)

    def estimate(self, analysis: Analysis, fix_for: Callable,
                 replay: Callable[[Fix], Callable[[], int]] | None = None) -> None:
        """Build this finding's fix and replay it (sets ``edit``, ``saving_ns``,
        ``saving_how``). ``replay``: takes the fix and returns what gives its saving when
        called (``saving_ns`` is then that callable until the caller calls it: the rules
        replay one finding's fix while the next one's is built)."""
        if not analysis.timeline.usable and self.saving_model.get("model", "none") != "none":
            self.edit, self.saving_ns = None, None
            self.saving_how = ("no estimate: the capture has no GPU side, so waiting for the GPU "
                               "cannot be told from the calls' own cost (capture with CUPTI)")
            return
        from .savings import NoEstimate

        rows = self.event_source() if self.event_source is not None else pl.DataFrame()
        try:
            self.edit = fix_for(self.saving_model, self.relation, rows, analysis, self.measures)
        except NoEstimate as why:
            self.edit, self.saving_ns, self.saving_how = None, None, f"no estimate: {why}"
            return
        if self.edit is None or self.edit.is_empty():
            self.edit = None
            self.saving_ns = None
            model = self.saving_model.get("model", "none")
            self.saving_how = ("no estimate: this finding describes the window"
                               if model == "none" else f"no estimate ({model}: nothing to edit)")
            return
        self.saving_ns = (analysis.timeline.saving(self.edit) if replay is None
                          else replay(self.edit))
        self.saving_how = self.edit.describe
        if "instead" in self.saving_model:
            self._estimate_instead(analysis, fix_for, replay, rows)

    def _estimate_instead(self, analysis: Analysis, fix_for: Callable,
                          replay: Callable[[Fix], Callable[[], int]] | None,
                          rows: pl.DataFrame) -> None:
        """The rule's second fix (``saving_model["instead"]``) from the same events: sets
        ``saving_instead`` (its ``saving_ns`` a callable while ``replay`` runs it, as the
        first fix's)."""
        from .savings import NoEstimate

        model = {k: v for k, v in self.saving_model["instead"].items() if k != "label"}
        out = {"label": self.saving_model["instead"]["label"], "saving_ns": None}
        try:
            fix = fix_for(model, self.relation, rows, analysis, self.measures)
        except NoEstimate as why:
            fix, out["saving_how"] = None, f"no estimate: {why}"
        if fix is not None and not fix.is_empty():
            self.edit_instead = fix
            out["saving_ns"] = (analysis.timeline.saving(fix) if replay is None
                                else replay(fix))
            out["saving_how"] = fix.describe
        else:
            out.setdefault("saving_how", f"no estimate ({model['model']}: nothing to edit)")
        self.saving_instead = out

    def resolve(self) -> None:
        """The replays' results in place of the callables :meth:`estimate` left (the rules
        replay one finding's fixes while the next one's are built)."""
        if callable(self.saving_ns):
            self.saving_ns = self.saving_ns()
        if self.saving_instead is not None and callable(self.saving_instead["saving_ns"]):
            self.saving_instead["saving_ns"] = self.saving_instead["saving_ns"]()

    def fix_key(self) -> tuple | None:
        """Identifies the timeline edit: two findings with the same key fix the same thing."""
        e = self.edit
        if e is None:
            return None
        parts = []
        for name in ("remove_calls", "unblock_calls", "cost_calls", "cost_ns", "gap_calls",
                     "gap_ns", "gpu_ops", "gpu_dur_ns", "gapless_ops", "graph_first",
                     "graph_last"):
            parts.append(hash(np.asarray(getattr(e, name)).tobytes()))
        return tuple(parts)

    def to_dict(self, examples: int = 5, window_ns: int = 0, steps: int = 0) -> dict:
        return {
            "rule_id": self.rule_id, "severity": self.severity, "title": self.title,
            "message": self.message, "site": self.site, "site_id": self.site_id,
            "source": self.source, "called_from": self.called_from,
            "user_chain": self.user_chain,
            **_saving_figures(self.saving_ns, window_ns, steps),
            "saving_incremental_ns": self.saving_incremental_ns,
            "saving_halves_ns": (list(self.saving_halves_ns)
                                 if self.saving_halves_ns is not None else None),
            "saving_how": self.saving_how, "saving_model": self.saving_model,
            "saving_instead": self._instead_dict(window_ns, steps),
            "cost_ns": self.cost_ns, "evidence": self.evidence,
            "fix": self.fix, "also": self.also, "occurrence_count": self.occurrence_count,
            "examples": self.examples(examples) if examples else [],
        }

    def _instead_dict(self, window_ns: int, steps: int) -> dict | None:
        """``saving_instead`` as the reports give it: its label, saving (also as a share of
        the window and per step) and how it was estimated."""
        inst = self.saving_instead
        if inst is None:
            return None
        return {"label": inst["label"], **_saving_figures(inst["saving_ns"], window_ns, steps),
                "saving_how": inst["saving_how"]}


def _saving_figures(ns: int | None, window_ns: int, steps: int) -> dict:
    """A saving as the reports give it: ``saving_ns``, its share of the window (%) and its
    part per step (null where unknown)."""
    return {"saving_ns": ns,
            "saving_pct_of_window": round(100 * ns / window_ns, 2)
            if ns is not None and window_ns else None,
            "saving_per_step_ns": ns // steps if ns is not None and steps else None}


class Tally:
    """Replays finished, told to ``progress`` as "WHAT (k of N)" from whichever thread ends
    one (in order: one at a time); nothing without ``progress``."""

    def __init__(self, progress: Callable[[str], None] | None, what: str, total: int) -> None:
        self._say, self._what, self._total, self._done = progress, what, total, 0
        self._lock = threading.Lock()
        if progress is not None and total:
            progress(f"{what} (0 of {total})")

    def tick(self, *_: object) -> None:
        if self._say is None:
            return
        with self._lock:
            self._done += 1
            self._say(f"{self._what} ({self._done} of {self._total})")


class Findings(list):
    """Findings, ranked by saving, and what all their fixes save together (``total_ns``: one
    replay with every fix applied, so no nanosecond is counted twice). Each finding's
    ``saving_incremental_ns`` is what it adds to the fixes ranked above it, for the first
    ``chain`` findings with a fix (``CHAIN``); the fixes ranked below them add ``rest_ns``
    together (their own ``saving_incremental_ns`` stay None)."""

    def __init__(self, findings: list[Finding], analysis: Analysis | None = None,
                 progress: Callable[[str], None] | None = None, chain: int = CHAIN) -> None:
        super().__init__(findings)
        self.total_ns: int | None = None
        self.rest_ns: int | None = None  # what the fixes past the chain add, together
        self.rest = 0  # how many fixes that is
        if analysis is not None:
            self._replay_together(analysis, progress, chain)

    def _replay_together(self, analysis: Analysis, progress: Callable[[str], None] | None,
                         chain: int) -> None:
        """Each of the first ``chain`` fixes replayed with those ranked above it (the k-th
        replay: the first k fixes together), then, where there are more, every fix at once.
        The chain is cut into runs, one a thread: a run starts with one replay of every fix
        before it combined, then adds its own fixes one at a time (each replay then runs where
        it differs from its thread's last one). A replay's outcome is the same from any
        reference, so the savings are those of one chain."""
        from concurrent.futures import ThreadPoolExecutor

        from zym.analysis.replay import Fix, replay_threads

        fixed = [f for f in self if f.edit is not None]
        if not fixed:
            self.total_ns = None
            return
        rest = [f.edit for f in fixed[chain:]]
        for f in fixed[chain:]:
            f.saving_incremental_ns = None
        fixed = fixed[:chain]
        edits = [f.edit for f in fixed]
        saving = analysis.timeline.saving
        tally = Tally(progress, "replaying the fixes together", len(edits) + bool(rest))
        # A chain whose first fix is a CUDA graph replays every prefix whole (graph fixes have
        # no incremental replay): a run's first replay then costs what a chained one does,
        # and the runs are as many as the threads (at 6.6 M events: ten 40 ms replays).
        whole = len(edits[0].graph_first) > 0 or len(edits[0].gapless_ops) > 0
        runs = min(replay_threads(), len(edits) if whole else max(1, len(edits) // MIN_RUN))
        cuts = [len(edits) * i // runs for i in range(runs + 1)]

        def run(lo: int, hi: int) -> list[int]:
            together = Fix.combine(edits[:lo + 1])   # every edit so far (associative)
            out = [saving(together, reference=True)]
            tally.tick()
            for edit in edits[lo + 1:hi]:
                together = Fix.chain(together, edit)
                out.append(saving(together))
                tally.tick()
            return out

        if runs == 1:
            totals = run(0, len(edits))
        else:
            with ThreadPoolExecutor(runs, thread_name_prefix="zym-replay") as pool:
                parts = [pool.submit(run, lo, hi) for lo, hi in pairwise(cuts)]
                totals = [t for p in parts for t in p.result()]
        before = 0
        for f, now in zip(fixed, totals, strict=True):
            f.saving_incremental_ns = max(now - before, 0)
            before = now
        if rest:  # every fix at once: the total, and what those past the chain add
            total = saving(Fix.combine(edits + rest), alone=True)
            tally.tick()
            self.rest, self.rest_ns = len(rest), max(total - before, 0)
            before = total
        self.total_ns = before

    def what_if(self, window_ns: int, steps: int) -> dict:
        total = self.total_ns
        return {"saving_ns": total, "findings": sum(1 for f in self if f.edit is not None),
                # the fixes ranked past the chain (no ``saving_incremental_ns`` of their own):
                # how many, and what they add to those above them, together
                "rest": self.rest, "rest_saving_ns": self.rest_ns,
                "saving_pct_of_window": round(100 * total / window_ns, 2)
                if total is not None and window_ns else None,
                "saving_per_step_ns": total // steps if total is not None and steps else None}
