"""Each finding's fix is replayed by one worker thread while the next finding's fix is built:
the same replays, in the findings' order, with the same savings as one after the other."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
from zym.analysis import analyze, replay
from zym.rules import engine, evaluate, load_packs

REPO = Path(__file__).resolve().parents[2]
SAMPLES = [REPO / "sample_traces" / "gpt_decode_server.parquet",
           REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_fixes_are_replayed_in_order_by_one_worker(path, monkeypatch):
    saving = replay.Timeline.saving
    seen: list[tuple[str, int]] = []

    def traced(self, fix):
        seen.append((threading.current_thread().name, id(fix)))
        return saving(self, fix)

    monkeypatch.setattr(replay.Timeline, "saving", traced)
    estimate = engine.Finding.estimate
    built: list[int] = []

    def estimating(self, analysis, fix_for, replay=None):
        estimate(self, analysis, fix_for, replay)
        if self.edit is not None:
            built.append(id(self.edit))
            assert replay is not None  # the rules hand the replay to the worker

    monkeypatch.setattr(engine.Finding, "estimate", estimating)
    a = analyze(path, lambda _stage: None)
    found = evaluate(a, load_packs(()))
    own = [s for s in seen if s[1] in set(built)]
    assert len(own) == len(built) > 3
    assert [i for _, i in own] == built  # the findings' order
    assert {name for name, _ in own} == {"zym-replay_0"}
    assert all(isinstance(f.saving_ns, int | None) for f in found)

    # the same savings replayed one after the other, in this thread
    monkeypatch.setattr(engine.Finding, "estimate",
                        lambda self, analysis, fix_for, replay=None:
                        estimate(self, analysis, fix_for))
    seen.clear()
    one_by_one = evaluate(analyze(path, lambda _stage: None), load_packs(()))
    assert {name for name, _ in seen} == {threading.main_thread().name}

    def rows(fs):
        return [(f.rule_id, f.site, f.saving_ns, f.saving_incremental_ns, f.saving_how)
                for f in fs]

    assert rows(found) == rows(one_by_one)
    assert found.total_ns == one_by_one.total_ns
