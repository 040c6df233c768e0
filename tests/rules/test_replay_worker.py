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


def test_an_error_in_a_replay_reaches_the_caller(monkeypatch):
    """A replay that fails in the worker fails the rules, with its own exception, and leaves
    no worker thread behind."""
    def failing(self, fix):
        raise RuntimeError("replay failed")

    a = analyze(SAMPLES[0], lambda _stage: None)
    monkeypatch.setattr(replay.Timeline, "saving", failing)
    with pytest.raises(Exception, match="RuntimeError: replay failed|^replay failed"):
        evaluate(a, load_packs(()))
    assert not [t for t in threading.enumerate() if t.name.startswith("zym-replay")]


def test_an_interrupt_drops_the_replays_not_yet_started(monkeypatch):
    """Ctrl-C while the fixes are built: the replay running ends, those queued behind it are
    not started (at 10 M each takes ~0.1-0.3 s; tens can be queued)."""
    import time

    started = []

    def slow(self, fix):
        started.append(fix)
        time.sleep(0.5)  # the main thread submits the next fix meanwhile
        return 0

    estimate = engine.Finding.estimate
    built = []

    def interrupted(self, analysis, fix_for, replay=None):
        if len(built) == 2:
            raise KeyboardInterrupt
        estimate(self, analysis, fix_for, replay)
        if self.edit is not None:
            built.append(self)

    a = analyze(SAMPLES[0], lambda _stage: None)
    packs = load_packs(())
    monkeypatch.setattr(replay.Timeline, "saving", slow)
    monkeypatch.setattr(engine.Finding, "estimate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        evaluate(a, packs)
    assert len(built) == 2 and len(started) == 1
