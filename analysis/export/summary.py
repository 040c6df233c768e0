"""The report every output shows: the analysis facts, the phases, the findings ranked by what
fixing them saves, the total of all fixes, and any ``--what-if`` replays, as plain data.

``zym analyze`` (text, markdown, JSON) and ``zym report`` (HTML) render this one dict, so they
show the same counts, in the same order.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from zym.analysis.units import fmt_bytes, fmt_ns

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
    if analysis.recording_slowdown > 1.0:  # a torch.profiler trace recorded on a slower host
        report["replay"]["recording_slowdown"] = round(analysis.recording_slowdown, 3)
    if getattr(tl, "sampled", None):  # fixes replayed on a sample of a long window
        report["replay"]["sample"] = tl.sampled
    report["findings"] = ([] if findings is None
                          else [f.to_dict(examples, window, steps) for f in findings])
    report["fixes_together"] = None if findings is None else findings.what_if(window, steps)
    if what_if is not None:
        report["what_if"] = what_if
    return report


_CUT_WHERE = {"an event": "inside an event", "nothing": "between two events",
              "the keys after its events": "after its events (the keys after them are lost)"}


def cut_short_line(cut: dict) -> str:
    """What a report says first of a trace cut short (``capture.cut_short``)."""
    where = _CUT_WHERE.get(cut.get("lost"), "")
    gz = "; its gzip stream ends early" if cut.get("gzip_cut") else ""
    read = cut.get("text_bytes_read")
    size = f" after {fmt_bytes(read)} of JSON text" if read else ""
    said = (f"CUT SHORT: the trace ends {where}{size}{gz} (a writer stopped, a full disk, a "
            "copy interrupted): its whole events are read")
    if cut.get("complete_until_ns") is not None:
        said += (", up to where every kind of event is still recorded; what ran after that "
                 "is missing, and a step it cut is left out")
    return said


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else ("es" if word.endswith("ss") else "s"))


def sample_line(sample: dict) -> str:
    """How the fixes of a long window, or of a capture's sample, were replayed
    (``zym.analysis.sample``)."""
    from zym.analysis.sample import share_text

    if sample.get("of_capture_sample"):
        return (f"the capture's sample: each fix replayed on each half of its {sample['runs']} "
                "slices (alternate ones) apart; each estimate gives both halves")
    return (f"a long window: each fix replayed on {share_text(sample)} ({sample['runs']} runs "
            "spread evenly, in two halves), scaled to the window; each estimate gives both "
            "halves")


def capture_sample_line(sample: dict) -> str:
    """How a capture too large for the memory budget was sampled (the report's ``sample``,
    :class:`zym.analysis.budget.Sample`)."""
    rows = sum(sample["sample_rows"].get(t, 0) for t in ("call", "gpu"))
    whole = sum(sample["capture_rows"].get(t, 0) for t in ("call", "gpu"))
    default = sample.get("default_budget_bytes")
    least = sample.get("least_bytes")
    if least is not None and least > sample["budget_bytes"]:  # no sample fits: the least read
        fit = (f"SAMPLED at the least: the memory budget ({fmt_bytes(sample['budget_bytes'])}"
               f"{'' if default is None else ', half the memory available'}) is below what "
               f"even the least sample holds (~{fmt_bytes(least)}: the interpreter and "
               f"libraries with its rows; the whole capture would take "
               f"~{fmt_bytes(sample['estimated_bytes'])})")
    elif default is None:
        fit = (f"SAMPLED to fit the memory budget ({fmt_bytes(sample['budget_bytes'])}; the "
               f"whole capture would take ~{fmt_bytes(sample['estimated_bytes'])})")
    else:
        fit = (f"SAMPLED in {fmt_bytes(sample['budget_bytes'])} of memory (the whole capture "
               f"would take ~{fmt_bytes(sample['estimated_bytes'])}, more than the default "
               f"budget, half the memory available: {fmt_bytes(default)})")
    return (f"{fit}: "
            f"{len(sample['slices'])} slices spread evenly{_cut(sample)}, "
            f"{100 * sample['fraction']:.1f}% of "
            f"its time ({rows:,} of {whole:,} CUDA calls and GPU ops); every figure below is "
            "the sample's (--memory-budget SIZE to widen it)")


def outside_sample_line(sample: dict, shown: int = 3) -> str | None:
    """The lines that sync or copy in a sampled capture but not in its sample, the costliest
    ``shown`` by name, with the whole capture's counts (the report's
    ``sample.sync_copy_lines``); None where the sample holds every such line."""
    said = sample.get("sync_copy_lines") or {}
    lines = said.get("outside") or []
    if not lines:
        return None
    named = ", ".join(f"{line['site']} ({_counts(line, said.get('capture_ns'))})"
                      for line in lines[:shown])
    more = f", and {len(lines) - shown:,} more" if len(lines) > shown else ""
    return (f"the capture has {plural(len(lines), 'line')} that "
            f"{'syncs or copies' if len(lines) == 1 else 'sync or copy'} outside the sample (in "
            f"no figure below; the whole capture's counts): {named}{more}")


def short_sample_line(sample: dict, shown: int = 3) -> str | None:
    """The lines whose syncs and copies take a larger share of the capture's time than of its
    sample's (``sample.sync_copy_lines.short``: :data:`zym.analysis.census.SHORT`), the
    costliest ``shown`` by name, with the capture's and the sample's counts; None where
    none."""
    said = sample.get("sync_copy_lines") or {}
    lines = said.get("short") or []
    if not lines:
        return None

    def held(line: dict) -> str:
        counts = "; ".join(f"{n:,} {one if n == 1 else many}" for n, one, many in (
            (line["sample_syncs"], "sync", "syncs"), (line["sample_copies"], "copy", "copies"))
            if n)
        share = 100 * line["sample_ns"] / max(said.get("sample_ns") or 0, 1)
        return f"{counts}, {fmt_ns(line['sample_ns'])}: {share:.2g}% of its time"

    named = ", ".join(f"{line['site']} (the capture: {_counts(line, said.get('capture_ns'))}; "
                      f"the sample: {held(line)})" for line in lines[:shown])
    more = f", and {len(lines) - shown:,} more" if len(lines) > shown else ""
    return (f"the sample holds {plural(len(lines), 'line')} short: "
            f"{'its' if len(lines) == 1 else 'their'} syncs and copies take a larger share of "
            f"the capture's time than of the sample's (the figures below say less of "
            f"{'it' if len(lines) == 1 else 'them'}): {named}{more}")


def sample_notes(sample: dict) -> list[tuple[str, str]]:
    """What a sampled report says of the lines that sync or copy, below how it sampled: each
    note a title (HTML's row) and its text (:func:`outside_sample_line`,
    :func:`short_sample_line`), those that have something to say."""
    notes = (("Outside the sample", outside_sample_line(sample)),
             ("Held short by the sample", short_sample_line(sample)))
    return [(title, text) for title, text in notes if text]


def replay_notes(replay: dict | None) -> list[tuple[str, str, bool]]:
    """What every report says of the replay its savings come from (``report["replay"]``):
    each note a title (HTML's row), its text, and whether it is a warning: the trace's host
    speed where torch.profiler's recording costs were scaled by it, and a replay of the window
    off from the recorded one by 5% or more."""
    replay = replay or {}
    notes = []
    slow = replay.get("recording_slowdown") or 1.0
    if slow >= 1.05:
        said = (f"the trace's ops dispatched at {slow:.2f}x a typical host's time (its median "
                "aten::empty): torch.profiler's cost of recording an op and a runtime call is "
                "taken out of the replay scaled by that")
        notes.append(("Host speed", said, False))
    if replay.get("usable") and abs(replay.get("error_pct", 0)) >= 5:
        said = f"the replay of this window is off by {replay['error_pct']:+.1f}%: savings are rough"
        notes.append(("Replay", said, True))
    return notes


def _counts(line: dict, capture_ns: int | None) -> str:
    """A line's syncs and copies in the whole capture, their times and (``capture_ns``, the
    capture's length) their share of its time."""
    share = (f": {100 * (line['sync_ns'] + line['copy_ns']) / capture_ns:.2g}% of the "
             "capture's time" if capture_ns else "")
    return "; ".join(f"{line[n]:,} {one if line[n] == 1 else n}, {fmt_ns(line[ns])}"
                     for n, ns, one in (("syncs", "sync_ns", "sync"),
                                        ("copies", "copy_ns", "copy")) if line[n]) + share


def _cut(sample: dict) -> str:
    """How many of a sample's slices were cut at the starts of steps (none: nothing said)."""
    n, cut = len(sample["slices"]), sample.get("slices_cut_at_steps", 0)
    return "" if not cut else " at whole steps" if cut == n else f" ({cut} at whole steps)"


def rest_line(together: dict) -> str | None:
    """What the fixes ranked past the chain of incremental replays add, together (the
    report's ``fixes_together``); None where every fix has its own increment."""
    rest = together.get("rest") or 0
    if not rest or together.get("rest_saving_ns") is None:
        return None
    first = together["findings"] - rest
    return (f"the {rest:,} fixes ranked below the first {first:,} add ~"
            f"{fmt_ns(together['rest_saving_ns'])} of it together (each alone saves what its "
            f"estimate says; what it adds to those above it is not replayed one by one)")


def phase_line(ph: dict) -> str:
    """One line: the capture's phases and what was analyzed."""
    if not ph:
        return ""
    parts = [f"capture {fmt_ns(ph['capture_ns'])}"]
    if ph.get("startup"):
        parts.append(f"startup {fmt_ns(ph['startup']['dur_ns'])}")
    if ph.get("warmup"):
        parts.append(f"warm-up {plural(ph['warmup']['steps'], 'step')} "
                     f"({fmt_ns(ph['warmup']['dur_ns'])})")
    steps = ph.get("steps")
    window = ph["window"]
    if window == "steady" and steps and steps["in_window"]:
        parts.append(f"analyzed: steady state, {plural(steps['in_window'], 'step')} of "
                     f"{steps['function']} ({fmt_ns(ph['window_ns'])}, "
                     f"{fmt_ns(steps['mean_ns'])} a step on average{_spread(steps)})")
    else:
        what = "the whole capture" if window in ("all",) or not ph.get("startup") and \
            window == "steady" else f"--window {window}"
        parts.append(f"analyzed: {what} ({fmt_ns(ph['window_ns'])})")
    return " · ".join(parts)


# Steps of one function that differ this much ran in different conditions (new shapes, other
# load on the host, a slower CPU state: on the H200 host one process ran a launch-bound step
# 1.7x slower than the next, and one capture's steps went from 158 to 394 ms): the estimates
# are for the window's average, and the reader should know the steps were not alike.
UNEVEN_STEPS = 1.5


def _spread(steps: dict) -> str:
    lo, hi = steps.get("min_ns"), steps.get("max_ns")
    if not lo or not hi or hi < UNEVEN_STEPS * lo:
        return ""
    return f"; uneven: {fmt_ns(lo)} to {fmt_ns(hi)}"


def instead_text(f: dict) -> str | None:
    """The rule's second fix, where it offers one: ``or the matmuls in bfloat16 (autocast):
    saves ~20 ms (8.1% · 2.0 ms/step)``; None where it offers none."""
    inst = f.get("saving_instead")
    if not inst:
        return None
    return f"or {inst['label']}: {saving_text(inst)}"


def saving_text(f: dict) -> str:
    """``saves ~12.3 ms (4.5% · 1.2 ms/step)``, or why there is no estimate."""
    if f.get("saving_ns") is None:
        return "no estimate"
    parts = [f"{f['saving_pct_of_window']:.1f}%"] if f.get("saving_pct_of_window") is not None \
        else []
    if f.get("saving_per_step_ns") is not None:
        parts.append(f"{fmt_ns(f['saving_per_step_ns'])}/step")
    return f"saves ~{fmt_ns(f['saving_ns'])}" + (f" ({' · '.join(parts)})" if parts else "")
