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
