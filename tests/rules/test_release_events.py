"""Once its fix is estimated, a finding keeps only its occurrences (``_Occurrences.release``):
the report, every finding's occurrences and its events (built again when asked) are what they
are when every column of every offending event is kept."""
from __future__ import annotations

from pathlib import Path

import pytest
from polars.testing import assert_frame_equal
from zym.analysis import analyze
from zym.rules import engine, evaluate, load_packs

REPO = Path(__file__).resolve().parents[2]
SAMPLES = [REPO / "sample_traces" / "gpt_decode_server.parquet",
           REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"]


RELEASE = engine._Occurrences.release


def _findings(path: Path, release: bool, monkeypatch):
    calls = []
    original = RELEASE

    def counted(self) -> None:
        calls.append(self)
        if release:
            original(self)

    monkeypatch.setattr(engine._Occurrences, "release", counted)
    found = evaluate(analyze(path, lambda _stage: None), load_packs(()))
    return found, calls


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_released_findings_read_as_kept_ones(path, monkeypatch):
    kept, _ = _findings(path, False, monkeypatch)
    released, calls = _findings(path, True, monkeypatch)
    assert calls and any(s.occ is not None for s in calls)  # something was released
    assert all(s.parts is None for s in calls)
    assert len(kept) == len(released)
    for a, b in zip(kept, released):
        assert a.to_dict(examples=5) == b.to_dict(examples=5)
        # the same rows; their order is not fixed (a rule without keys collects its lazy
        # query as it comes: two runs of main differ there too)
        assert_frame_equal(_sorted(a.occurrence_frame), _sorted(b.occurrence_frame))
        if a.event_source is not None:
            assert_frame_equal(_sorted(a.event_source()), _sorted(b.event_source()))


def _sorted(df):
    return df.sort(df.columns, nulls_last=True)


def test_examples_are_the_costliest_occurrences():
    """A finding's examples (lazily sorted, polars keeping the first rows) against the
    occurrences sorted in Python: longest first, unknown durations last, earlier first."""
    import random

    import polars as pl
    from zym.rules.findings import OCCURRENCE_COLUMNS, Finding

    rng = random.Random(7)
    rows = [{"pid": 1, "tid": rng.randrange(4), "ts_ns": ts, "correlation_id": ts + 1,
             "dur_ns": None if rng.random() < 0.3 else rng.randrange(50)}
            for ts in rng.sample(range(10**6), 5000)]
    frame = pl.DataFrame(rows, schema={c: pl.Int64 for c in OCCURRENCE_COLUMNS})
    want = sorted(rows, key=lambda r: (r["dur_ns"] is None, -(r["dur_ns"] or 0), r["ts_ns"]))
    finding = Finding("r", "info", "t", "m", "s", [], {}, "f",
                      occurrence_source=lambda: frame)
    for n in (1, 5, 60, 4000, 6000):
        got = finding.examples(n)
        assert got == [{c: r[c] for c in OCCURRENCE_COLUMNS} for r in want[:n]], n
    assert Finding("r", "info", "t", "m", "s", [], {}, "f").examples() == []
