"""A finding: one rule firing on one group (usually one call site) of a capture."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

OCCURRENCE_COLUMNS = ("pid", "tid", "ts_ns", "dur_ns", "correlation_id")


@dataclass
class Finding:
    """What is wrong, where, what it costs and how to fix it.

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
    cost_ns: int = 0  # what findings are ranked by (CPU stall, GPU time or GPU idle)
    pack: str = ""
    site_id: int | None = None  # stack node of the site (joins the call-path graph)
    occurrence_count: int = 0
    group_key: tuple = ()  # the rule's group: ((column, value), ...), e.g. the code site
    # Builds this finding's occurrences on first use (exports ask; text reports never do).
    occurrence_source: Callable[[], pl.DataFrame] | None = field(default=None, repr=False)
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
            self._occurrences = self.occurrence_frame.select(OCCURRENCE_COLUMNS).to_dicts()
        return self._occurrences

    def examples(self, n: int = 5) -> list[dict]:
        """The ``n`` costliest occurrences (longest first), for reports."""
        return (self.occurrence_frame.sort("dur_ns", "ts_ns", descending=[True, False],
                                           nulls_last=True)
                .head(n).select(OCCURRENCE_COLUMNS).to_dicts())

    def to_dict(self, examples: int = 5) -> dict:
        return {
            "rule_id": self.rule_id, "severity": self.severity, "title": self.title,
            "message": self.message, "site": self.site, "site_id": self.site_id,
            "user_chain": self.user_chain, "cost_ns": self.cost_ns, "evidence": self.evidence,
            "fix": self.fix, "occurrence_count": self.occurrence_count,
            "examples": self.examples(examples) if examples else [],
        }
