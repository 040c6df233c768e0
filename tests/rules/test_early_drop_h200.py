"""Relations built for the rules keep only rows some rule's ``where`` may keep (the relaxed
filters: calls, GPU operations, gaps); each rule's groups and measures on them equal those
on the whole relations. On H200 workloads besides the bundled one, among them the two whose
long gaps both gap rules find (after a sync, before a launch)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from zym import rules
from zym.analysis import analyze
from zym.analysis.relations import Relations
from zym.rules.engine import _fits_gpus, _plan, rule_columns

RESULTS = Path(__file__).resolve().parents[2] / "bench/whatif/results"


@pytest.mark.parametrize("trace", ["h200-varied/pooled.trace.json.gz",
                                   "h200-varied/churn-memory.trace.json.gz",
                                   "h200-threads/sidecar.trace.json.gz"])
def test_rules_on_kept_rows_equal_rules_on_whole_relations(trace):
    analysis = analyze(RESULTS / trace)
    chosen = [r for p in rules.load_packs(plugins=False) for r in p.rules
              if _fits_gpus(r.gpus, analysis)]
    wheres: dict[str, list[dict]] = {}
    for rule in chosen:
        wheres.setdefault(rule.relation, []).append(rule.where)
    whole, kept = Relations(analysis), Relations(analysis)
    fired = set()
    for rule in chosen:
        cols = rule_columns(rule)
        got = [_plan(rule, rel, rel.materialize(rule.relation, cols, w))["grouped"]
               .collect().drop("_l_stack_id", strict=False).sort(pl.all())
               for rel, w in ((whole, None), (kept, wheres[rule.relation]))]
        assert got[0].equals(got[1]), rule.id
        if got[0].height:
            fired.add(rule.id)
    if "pooled" in trace:  # both gap rules found something here: the gaps relation counts
        assert {"utilization.idle-after-sync", "utilization.idle-before-launch"} <= fired
    # and rows were dropped: the gaps of microseconds no gap rule keeps
    assert kept.materialize("gaps", set(), wheres["gaps"]).height < \
        whole.materialize("gaps", set(), None).height
