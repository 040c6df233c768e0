"""The rule engine holds one relation's frame at a time: each is dropped once its rules'
queries have run, and a rule's plan (with the frame it reads) once its findings are released
(built again if asked). At 10 M GPU operations the GPU relation (5 M rows that no finding
read) was otherwise kept beside the calls relation's build and through every replay."""
from __future__ import annotations

import weakref
from pathlib import Path

import pytest
from zym.analysis import analyze, relations
from zym.rules import evaluate, load_packs

REPO = Path(__file__).resolve().parents[2]
SAMPLES = [REPO / "sample_traces" / "gpt_decode_server.parquet",
           REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"]


def _rule_keys(rel) -> list[str]:
    """The frames the rules' own materializations keep (``wheres`` given)."""
    return [k for k in rel._eager if k.startswith("rel:") and not k.endswith(":null")]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_one_relation_at_a_time(path, monkeypatch):
    a = analyze(path, lambda _stage: None)
    alive_at_build: list[set[str]] = []
    built: list[tuple[str, weakref.ref]] = []
    materialize = relations.Relations.materialize

    def traced(self, name, columns, wheres=None):
        if wheres:  # the engine's: which earlier frames are alive, then build
            alive_at_build.append({n for n, r in built if r() is not None})
        out = materialize(self, name, columns, wheres)
        if wheres:
            built.append((name, weakref.ref(out)))
        return out

    monkeypatch.setattr(relations.Relations, "materialize", traced)
    evaluate(a, load_packs(()))
    assert len(built) >= 3  # gpu, steps, calls, gaps, windows (those with rules)
    assert not _rule_keys(a.relations)  # none kept by the relations once the rules ran
    # No earlier frame is alive at a build: the engine dropped it, and the rules that fired
    # hold a lazy query of it (their plans, until released: the test below), not the frame;
    # once every finding is estimated, none is. (Checked: "alive only where a rule that fired
    # holds it" could not fail, every relation has a rule that fired on both captures; each
    # frame kept through the next build, dropped when the rules were done, passed it.)
    assert alive_at_build == [set()] * len(built)
    assert {n for n, r in built if r() is not None} == set()


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_released_plans_are_dropped(path):
    a = analyze(path, lambda _stage: None)
    found = evaluate(a, load_packs(()))
    stores = {id(f.release_events.__self__): f.release_events.__self__
              for f in found if f.release_events is not None}
    assert stores and all(s.plan is None for s in stores.values())
    for f in found:  # the events, built again from the relation built again
        if f.event_source is not None:
            assert f.event_source().height >= f.occurrence_count > 0


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_events_keep_what_fixes_and_occurrences_read(path):
    from zym.analysis.relations import OCCURRENCE, ROW_KEY
    from zym.rules.engine import _MODEL_COLUMNS

    found = evaluate(analyze(path, lambda _stage: None), load_packs(()))
    checked = 0
    for f in found:
        if f.event_source is None:
            continue
        cols = set(f.event_source().columns)
        keys = {k for k, _ in f.group_key}
        allowed = {*keys, ROW_KEY[f.relation], "call_idx",
                   *_MODEL_COLUMNS.get(f.saving_model.get("model", "none"), ())}
        for expr in OCCURRENCE[f.relation]:
            allowed.update(expr.meta.root_names())
        assert cols <= allowed, (f.rule_id, cols - allowed)
        assert ROW_KEY[f.relation] in cols or f.relation not in ("calls", "gpu", "gaps")
        checked += 1
    assert checked
