"""Each finding's fix is replayed by worker threads while the next finding's fix is built, and
the fixes together in runs, one a thread: the same savings as one replay after the other in
one thread, and the same as each prefix of the fixes combined and replayed from scratch."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
from zym.analysis import analyze, replay
from zym.rules import engine, evaluate, findings, load_packs

REPO = Path(__file__).resolve().parents[2]
SAMPLES = [REPO / "sample_traces" / "gpt_decode_server.parquet",
           REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_fixes_are_replayed_by_workers_with_the_savings_of_one_thread(path, monkeypatch):
    saving = replay.Timeline.saving
    seen: list[tuple[str, int]] = []

    def traced(self, fix, **kw):
        seen.append((threading.current_thread().name, id(fix)))
        return saving(self, fix, **kw)

    monkeypatch.setattr(replay.Timeline, "saving", traced)
    monkeypatch.setenv(replay.ENV_REPLAY_THREADS, "3")
    monkeypatch.setattr(findings, "MIN_RUN", 2)   # the sample's few fixes: several runs
    estimate = engine.Finding.estimate
    built: list[int] = []

    def estimating(self, analysis, fix_for, replay=None):
        estimate(self, analysis, fix_for, replay)
        for edit in (self.edit, self.edit_instead):  # (its rule's second fix too)
            if edit is not None:
                built.append(id(edit))
                assert replay is not None  # the rules hand the replay to the workers

    monkeypatch.setattr(engine.Finding, "estimate", estimating)
    a = analyze(path, lambda _stage: None)
    found = evaluate(a, load_packs(()))
    own = [s for s in seen if s[1] in set(built)]
    assert len(own) == len(built) > 3
    assert sorted(i for _, i in own) == sorted(built)   # each fix once
    assert {name.rsplit("_", 1)[0] for name, _ in seen} == {"zym-replay"}
    chained = [s for s in seen if s[1] not in set(built)]
    assert len({name for name, _ in chained}) > 1       # the runs on several threads
    assert all(isinstance(f.saving_ns, int | None) for f in found)

    # the same savings replayed one after the other, in this thread
    monkeypatch.setenv(replay.ENV_REPLAY_THREADS, "1")
    monkeypatch.setattr(engine.Finding, "estimate",
                        lambda self, analysis, fix_for, replay=None:
                        estimate(self, analysis, fix_for, None))
    seen.clear()
    b = analyze(path, lambda _stage: None)
    one_by_one = evaluate(b, load_packs(()))
    assert {name for name, _ in seen} == {threading.main_thread().name}

    def rows(fs):
        return [(f.rule_id, f.site, f.saving_ns, f.saving_incremental_ns, f.saving_how)
                for f in fs]

    assert rows(found) == rows(one_by_one)
    assert found.total_ns == one_by_one.total_ns
    # and as each prefix of the ranked fixes, combined at once and replayed whole
    assert_prefix_savings(found, b.timeline)


def test_a_chain_led_by_a_cuda_graph_is_cut_into_runs_whatever_its_length(monkeypatch):
    """The bundled capture's first-ranked fix is a CUDA graph, so every prefix of the chain is
    replayed whole: with the default run length (more than its fixes) the chain still goes
    to two threads, and its savings are each prefix's, combined at once and replayed whole."""
    saving = replay.Timeline.saving
    threads: set[str] = set()
    other = threading.Event()

    def traced(self, fix, **kw):
        if not kw.get("alone"):      # the fixes together (a finding's own fix runs alone)
            threads.add(threading.current_thread().name)
            if len(threads) > 1:
                other.set()
            else:   # the first run waits (at most 10 s) for the other thread's to start:
                other.wait(10)   # one thread could otherwise finish both before it starts
        return saving(self, fix, **kw)

    monkeypatch.setattr(replay.Timeline, "saving", traced)
    monkeypatch.setenv(replay.ENV_REPLAY_THREADS, "2")
    a = analyze(SAMPLES[0], lambda _stage: None)
    found = evaluate(a, load_packs(()))
    edits = [f.edit for f in found if f.edit is not None]
    assert len(edits[0].graph_first) > 0 and 2 <= len(edits) < findings.MIN_RUN * 2
    assert len(threads) == 2
    assert_prefix_savings(found, a.timeline)


def assert_prefix_savings(found: findings.Findings, tl: replay.Timeline) -> None:
    """Each finding's incremental saving and the total are those of each prefix of the
    ranked fixes, combined at once and replayed whole (from nothing)."""
    edits = [f.edit for f in found if f.edit is not None]
    prefix = [max(tl.baseline.end_ns - tl.replay(replay.Fix.combine(edits[:k + 1]),
                                                 incremental=False).end_ns, 0)
              for k in range(len(edits))]
    incremental = [f.saving_incremental_ns for f in found if f.edit is not None]
    assert incremental == [max(now - was, 0) for was, now in zip([0, *prefix], prefix)]
    assert found.total_ns == prefix[-1]


def test_an_error_in_a_replay_reaches_the_caller(monkeypatch):
    """A replay that fails in the worker fails the rules, with its own exception, and leaves
    no worker thread behind."""
    def failing(self, fix, **kw):
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

    def slow(self, fix, **kw):
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
    monkeypatch.setenv(replay.ENV_REPLAY_THREADS, "1")   # one worker: the rest are queued
    monkeypatch.setattr(replay.Timeline, "saving", slow)
    monkeypatch.setattr(engine.Finding, "estimate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        evaluate(a, packs)
    assert len(built) == 2 and len(started) == 1


def test_the_timeline_built_ahead_fails_only_where_it_is_needed(monkeypatch):
    """The rules build the replay's timeline on a thread while they run: a timeline that cannot
    be built fails the rules when a finding's fix needs it, and nothing when no finding does
    (as before it was built ahead)."""
    def broken(self, *a, **k):
        raise RuntimeError("no timeline")

    rules = [r for pack in load_packs(()) for r in pack.rules]
    monkeypatch.setattr(replay.Timeline, "__init__", broken)
    with pytest.raises(RuntimeError, match="no timeline"):
        engine.evaluate_rules(analyze(SAMPLES[0], lambda _stage: None), rules)
    monkeypatch.setattr(engine, "_evaluate", lambda analysis, rules, rel: [])
    assert list(engine.evaluate_rules(analyze(SAMPLES[0], lambda _stage: None), rules)) == []
    assert not [t for t in threading.enumerate() if t.name.startswith("zym-replay")]


@pytest.mark.parametrize("value", ["two", "0", "-1", "1.5"])
def test_a_bad_thread_count_is_one_line_and_exit_2(value):
    import os

    from console import error_line, typer_app

    run = typer_app("analyze", str(SAMPLES[0]),
                    env={**os.environ, replay.ENV_REPLAY_THREADS: value})
    assert error_line(run) == (
        f"zym: error: ZYM_REPLAY_THREADS={value!r}: give a number of threads, 1 or more "
        "(or unset it: the cores this process may use, at most 4)")
