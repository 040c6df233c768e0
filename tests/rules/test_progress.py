"""What the rules tell a progress callback: the stage, then each finding's fix and the fixes
together counted up to their number, in order, from the replay threads too; and what the CLI
shows on a terminal."""
from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from zym.analysis import analyze, replay
from zym.rules import evaluate, findings, load_packs

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "gpt_decode_server.parquet"


def _counts(said: list[str], what: str) -> list[tuple[int, int]]:
    return [(int(m[1]), int(m[2])) for s in said
            if (m := re.fullmatch(re.escape(what) + r" \((\d+) of (\d+)\)", s))]


@pytest.mark.parametrize("threads", ["1", "3"])
def test_replays_are_counted_to_their_number(threads, monkeypatch):
    monkeypatch.setenv(replay.ENV_REPLAY_THREADS, threads)
    monkeypatch.setattr(findings, "MIN_RUN", 2)   # the sample's few fixes: several runs
    said: list[str] = []
    callers: set[str] = set()

    def progress(stage: str) -> None:
        said.append(stage)
        callers.add(threading.current_thread().name)

    found = evaluate(analyze(SAMPLE, lambda _stage: None), load_packs(()), progress=progress)
    assert re.fullmatch(r"applying \d+ rules", said[0])
    own = _counts(said, "estimating each finding's fix")
    n_own = found_before_merge = own[-1][1]
    assert own == [(k, n_own) for k in range(n_own + 1)]   # 0 of n, 1 of n, ... n of n
    assert found_before_merge >= len(found) > 3
    fixed = sum(1 for f in found if f.edit is not None)
    together = _counts(said, "replaying the fixes together")
    assert together == [(k, fixed) for k in range(fixed + 1)]
    # the stages in order: every own fix counted before the first fix together
    assert said.index(f"estimating each finding's fix ({n_own} of {n_own})") < said.index(
        f"replaying the fixes together (0 of {fixed})")
    if threads == "3":
        assert any(name.startswith("zym-replay") for name in callers)


def test_no_progress_is_no_message(monkeypatch):
    """Without a callback nothing is counted (and nothing fails)."""
    ticks: list[int] = []
    tick = findings.Tally.tick

    def counting(self, *a):
        ticks.append(1)
        return tick(self, *a)

    monkeypatch.setattr(findings.Tally, "tick", counting)
    found = evaluate(analyze(SAMPLE, lambda _stage: None), load_packs(()))
    assert len(found) > 3 and ticks   # ticked, but told no one


def test_zym_analyze_shows_the_replays_counted(monkeypatch, capsys):
    """`zym analyze` hands its spinner's stage callback to the rules: the counts reach it."""
    import contextlib

    from zym.cli import bodies, progress

    said: list[str] = []

    @contextlib.contextmanager
    def recording(enabled: bool = True):
        yield said.append

    monkeypatch.setattr(progress, "stage_progress", recording)
    assert bodies.analyze(SAMPLE, fmt="json") == 0
    capsys.readouterr()
    own, together = (_counts(said, w) for w in ("estimating each finding's fix",
                                                "replaying the fixes together"))
    assert own and own[-1][0] == own[-1][1] > 0
    assert together and together[-1][0] == together[-1][1] > 0
