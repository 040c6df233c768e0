"""A capture with thousands of call sites (bench/make_synthetic.py, ``sites``): rules with
hundreds of findings pick every finding's examples in one query, and only the first
``CHAIN`` fixes are replayed one by one with those above them."""
from __future__ import annotations

import pytest
from synthetic import make_synthetic
from zym import rules
from zym.analysis import analyze
from zym.rules import engine
from zym.rules.findings import CHAIN, OCCURRENCE_COLUMNS, top_examples


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    path = make_synthetic(6_000, tmp_path_factory.mktemp("sites") / "s.parquet",
                          sites=800, python_frames=400)
    analysis = analyze(path)
    return analysis, rules.evaluate(analysis)


def _by_hand(occurrences: list[dict], n: int) -> list[dict]:
    """The second method: Python's sort of the occurrences as dicts."""
    key = lambda o: (-o["dur_ns"], o["ts_ns"], o["pid"], o["tid"], o["correlation_id"])
    return [{c: o[c] for c in OCCURRENCE_COLUMNS} for o in sorted(occurrences, key=key)[:n]]


def test_examples_picked_together_are_each_findings_own(found):
    _, findings = found
    per_rule: dict[str, int] = {}
    for f in findings:
        per_rule[f.rule_id] = per_rule.get(f.rule_id, 0) + 1
    many = {r for r, k in per_rule.items() if k >= engine.EXAMPLES_TOGETHER}
    assert many, per_rule  # rules with enough findings to pick them together
    checked = 0
    for f in findings:
        for n in (1, 5):
            got = f.examples(n)
            assert got == _by_hand(f.occurrences, n) == top_examples(f.occurrence_frame, n)
        checked += f.rule_id in many
    assert checked >= engine.EXAMPLES_TOGETHER


def test_the_chain_stops_and_the_rest_adds_up(found):
    from zym.rules.findings import Findings

    analysis, findings = found
    fixed = [f for f in findings if f.edit is not None]
    assert len(fixed) > 12
    short = Findings(list(findings), analysis, chain=12)
    inc = [f.saving_incremental_ns for f in fixed]
    assert all(v is not None for v in inc[:12]) and all(v is None for v in inc[12:])
    assert short.rest == len(fixed) - 12
    assert sum(inc[:12]) + short.rest_ns == short.total_ns == findings.total_ns


def test_the_pinned_memory_edit_is_the_copies_own(found):
    """The pinned-memory model's edit of each finding against a second method: the finding's
    calls looked up in the calls table with polars (their copy direction, own operation and
    bytes), and the edit built from those rows as the model's doc says."""
    import numpy as np
    import polars as pl
    from zym.rules.savings import _async_copy_cost, _host_bandwidth

    analysis, findings = found
    pinned = [f for f in findings if f.saving_model.get("model") == "pin" and f.edit is not None]
    assert pinned
    calls = analysis.facts.calls
    for f in pinned:
        idx = f.event_source()["call_idx"].drop_nulls().unique().to_list()  # its calls
        rows = calls.filter(pl.col("call_idx").is_in(idx)
                            & pl.col("copy_kind").is_in(["HtoD", "DtoH"]))
        want_cost, want_ops, want_dur = [], [], []
        for direction in ("HtoD", "DtoH"):
            mine = rows.filter(pl.col("copy_kind") == direction).sort("call_idx")
            bw, _ = _host_bandwidth(analysis, direction)
            want_cost += [_async_copy_cost(analysis, direction)] * mine.height
            own = mine.filter(pl.col("own_row").is_not_null())
            want_ops += own["own_row"].to_list()
            want_dur += [int(b / bw + 1_000) for b in own["bytes"].fill_null(0).to_list()]
        assert np.array_equal(np.sort(f.edit.cost_calls), rows["call_idx"].sort().to_numpy())
        assert f.edit.cost_ns.tolist() == want_cost
        assert f.edit.gpu_ops.tolist() == want_ops and f.edit.gpu_dur_ns.tolist() == want_dur


def test_the_reports_say_what_the_fixes_past_the_chain_add(found):
    """Text, markdown and HTML say, under the total, how many fixes are past the chain and
    what they add together; the JSON report has both numbers."""
    import io

    from rich.console import Console
    from zym.analysis.export.html_report import _summary_html
    from zym.analysis.export.summary import build_report
    from zym.analysis.units import fmt_ns
    from zym.cli.render import render_markdown, render_report
    from zym.rules.findings import Findings

    analysis, findings = found
    short = Findings(list(findings), analysis, chain=12)
    report = build_report(analysis, short, 5, 0)
    together = report["fixes_together"]
    assert (together["rest"], together["rest_saving_ns"]) == (short.rest, short.rest_ns)
    line = f"{short.rest:,} fixes ranked below the first 12 add ~{fmt_ns(short.rest_ns)}"
    out = io.StringIO()
    render_report(report, Console(file=out, width=400), 5)
    assert line in out.getvalue()
    assert line.replace("~", "\\~").replace(".", "\\.") in render_markdown(report, 5)
    assert line in _summary_html(report)
    fixed = sum(f.edit is not None for f in findings)
    assert fixed > CHAIN   # the default chain stops here too
    plain = build_report(analysis, findings, 5, 0)["fixes_together"]
    assert plain["rest"] == fixed - CHAIN and plain["rest_saving_ns"] is not None
    whole = Findings(list(findings), analysis, chain=fixed)
    plain = build_report(analysis, whole, 5, 0)["fixes_together"]  # the whole chain
    assert (plain["rest"], plain["rest_saving_ns"]) == (0, None)
