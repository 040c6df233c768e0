"""`zym capture --rotate` arguments and file names (no root needed: checked before any BPF)."""
from __future__ import annotations

import subprocess
import sys

import pytest
from zym.capture.rotate import interval_path, parse_interval
from zym.schemas.errors import CaptureError


@pytest.mark.parametrize(("text", "seconds"), [("60s", 60.0), ("5m", 300.0), ("1h", 3600.0),
                                               ("250ms", 0.25), ("2", 2.0), ("0.5s", 0.5)])
def test_parse_interval(text, seconds):
    assert parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "10x", "-5s", "50ms", "0"])
def test_parse_interval_rejects(text):
    with pytest.raises(CaptureError, match="--rotate"):
        parse_interval(text)


def test_interval_path_sorts_by_time_and_index(tmp_path):
    out = tmp_path / "serve.parquet"
    t = 1_796_148_868_280_293_140  # 2026-12-01T18:14:28.280Z
    assert interval_path(out, t, 3).name == "serve-20261201T181428.280Z-0003.parquet"
    names = [interval_path(out, t + i * 60 * 10**9, i).name for i in range(12)]
    assert names == sorted(names)


@pytest.mark.parametrize(("args", "needle"), [
    (["--keep", "3", "--", "true"], "--rotate"),
    (["--rotate", "soon", "--", "true"], "--rotate 'soon'"),
    (["--rotate", "1s", "--label", "novalue", "--", "true"], "KEY=VALUE"),
])
def test_bad_rotate_arguments_exit_2(tmp_path, args, needle):
    r = subprocess.run([sys.executable, "-m", "zym.cli.main", "capture", "-o",
                        str(tmp_path / "x.parquet"), *args], capture_output=True, text=True,
                       check=False, timeout=60)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_first_interval_starts_when_recording_begins(tmp_path):
    """Compiling the probes takes seconds after the writer is made: the first interval starts
    when the session says recording begins (no files of nothing before it), and a call already
    in keeps the intervals where they are."""
    import time

    import numpy as np
    from zym.capture.events import CALL_DTYPE
    from zym.capture.rotate import RotatingWriter

    w = RotatingWriter(tmp_path / "s.parquet", 0.25, meta_for=lambda: None, log=lambda m: None)
    try:
        made = w.start_ns
        time.sleep(0.6)                      # longer than two periods: the probes compiling
        now = time.monotonic_ns()
        w.begin(now)
        assert w._current.index == 0 and w._current.start_ns == now > made
        assert w._current.end_ns == now + 250_000_000
        call = np.zeros(1, CALL_DTYPE)
        call["ts_ns"] = now + 1_000
        w.add_calls(call)
        w.begin(now + 5_000)                 # too late: a call is in
        assert w._current.start_ns == now and w._current.calls == 1
    finally:
        w.abandon()
