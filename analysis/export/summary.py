"""The report every output shows: the analysis facts, the phases, the findings ranked by what
fixing them saves, the total of all fixes, and any ``--what-if`` replays, as plain data.

``zym analyze`` (text, markdown, JSON) and ``zym report`` (HTML) render this one dict, so they
show the same counts, in the same order.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zym.analysis import Analysis
    from zym.rules.findings import Findings


def window_scale(analysis: Analysis) -> tuple[int, int]:
    """The window length and its number of steps (0 without steps): what savings are
    expressed against."""
    steps = analysis.steps_in_window()
    return analysis.facts.window_ns, (steps.count if steps is not None else 0)


def build_report(analysis: Analysis, findings: Findings | None, top: int | None = None,
                 examples: int = 0, what_if: dict | None = None) -> dict:
    """``analysis.to_dict(top)`` plus ``findings`` (ranked; all of them), ``fixes_together``
    (one replay with every fix), ``replay`` (how well the unfixed replay reproduces the
    window) and ``what_if`` (the ``--what-if`` replays), when given."""
    report = analysis.to_dict(top)
    window, steps = window_scale(analysis)
    tl = analysis.timeline
    report["replay"] = tl.fidelity | {"usable": tl.usable}
    report["findings"] = ([] if findings is None
                          else [f.to_dict(examples, window, steps) for f in findings])
    report["fixes_together"] = None if findings is None else findings.what_if(window, steps)
    if what_if is not None:
        report["what_if"] = what_if
    return report
