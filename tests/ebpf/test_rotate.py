"""`zym capture --rotate`: one file per interval, nothing lost or counted twice at the
boundaries (every call the stand-in program made is in exactly one file, inside that file's
bounds), stacks resolved in every file, --keep bounds the files kept, --pid works too."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from itertools import pairwise
from pathlib import Path

import polars as pl
import pytest
from ebpf_helpers import WORKLOAD, kill, markers, start_zym, wait_for_line, zym_capture

APIS = ("cuLaunchKernel", "cuLaunchKernelEx", "cuMemsetD32Async", "cuMemcpyDtoHAsync_v2",
        "cuStreamSynchronize")
THREADS = 2  # workload.py: the main thread and one worker, ITERS iterations each
pytestmark = pytest.mark.ebpf


def rotated(out: Path) -> list[Path]:
    """The interval files of ``out``, in interval order."""
    pattern = re.compile(re.escape(out.stem) + r"-\d{8}T\d{6}\.\d{3}Z-(\d{4})\.parquet$")
    found = [(int(m.group(1)), p) for p in out.parent.iterdir()
             if (m := pattern.match(p.name))]
    return [p for _, p in sorted(found)]


def read(path: Path) -> tuple[pl.DataFrame, dict]:
    """A file's calls and metadata, read with polars alone."""
    meta = json.loads(pl.read_parquet_metadata(path)["zym.meta"])
    return pl.read_parquet(path).filter(pl.col("record") == "call"), meta


def check_partition(files: list[Path], iters: int) -> list[tuple[pl.DataFrame, dict]]:
    parts = [read(f) for f in files]
    names = Counter()
    for calls, meta in parts:
        iv = meta["extra"]["interval"]
        end = calls["ts_ns"] + calls["dur_ns"]
        # each call lies in its own file's interval: [start, end) by the call's end time
        assert ((end >= iv["start_mono_ns"]) & (end < iv["end_mono_ns"])).all(), iv
        assert iv["late_calls"] == 0
        names.update(calls["name"].to_list())
    # back to back: no gap and no overlap between consecutive intervals
    for (_, a), (_, b) in pairwise(parts):
        assert a["extra"]["interval"]["end_mono_ns"] == b["extra"]["interval"]["start_mono_ns"]
    # the program's own count: THREADS x ITERS of each API, none lost, none twice
    assert names == {api: THREADS * iters for api in APIS}
    return parts


def test_rotate_command_loses_nothing_at_boundaries(fake_cuda, tmp_path):
    iters = 400
    out = tmp_path / "svc.parquet"
    run = zym_capture(["--rotate", "250ms", "--label", "service=decode", "--label",
                       "version=7", "--", sys.executable, str(WORKLOAD)], out,
                      env={"FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(fake_cuda),
                           "ITERS": str(iters), "SYNC_US": "2000"}, timeout=120)
    assert run.rc == 0, run.stderr
    files = rotated(out)
    parts = check_partition(files, iters)
    assert sum(1 for calls, _ in parts if calls.height) >= 3, [c.height for c, _ in parts]
    assert [m["extra"]["interval"]["index"] for _, m in parts] == list(range(len(files)))
    assert all(m["extra"]["labels"] == {"process": Path(sys.executable).name,
                                        "service": "decode", "version": "7"}
               for _, m in parts)
    # the last file with calls resolves its stacks (frames were seen in the first interval)
    from zym.schemas import open_capture

    last = [f for f, (c, _) in zip(files, parts) if c.height][-1]
    cap = open_capture(last)
    frames = cap.load("frame")
    lines = set(frames.filter(pl.col("file") == str(WORKLOAD))["line"].to_list())
    assert markers()["sync"] in lines and markers()["worker_forward"] in lines
    assert not list(tmp_path.glob("*.raw-*"))


def test_rotate_keep_bounds_the_files(fake_cuda, tmp_path):
    out = tmp_path / "k.parquet"
    run = zym_capture(["--rotate", "200ms", "--keep", "2", "--", sys.executable,
                       str(WORKLOAD)], out,
                      env={"FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(fake_cuda),
                           "ITERS": "300", "SYNC_US": "2000"}, timeout=120)
    assert run.rc == 0, run.stderr
    files = rotated(out)
    assert len(files) == 2, run.stderr
    indexes = [read(f)[1]["extra"]["interval"]["index"] for f in files]
    written = re.findall(r"interval (\d+): ", run.stderr)
    assert len(written) > 2 and indexes == [int(i) for i in written[-2:]]


def test_rotate_pid(fake_cuda, tmp_path):
    iters = 300
    go = tmp_path / "go"
    # INIT_SLEEP: as CUDA's own init, time for zym to find the library in the maps and probe it
    target = subprocess.Popen([sys.executable, str(WORKLOAD)], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "FAKECUDA": "libcuda.so.1",
                                              "LD_LIBRARY_PATH": str(fake_cuda),
                                              "GO_FILE": str(go), "ITERS": str(iters),
                                              "SYNC_US": "2000", "INIT_SLEEP": "0.5"})
    assert target.stdout.readline().startswith("pid ")
    out = tmp_path / "p.parquet"
    zym = start_zym(["--pid", str(target.pid), "--rotate", "300ms"], out)
    try:
        wait_for_line(zym.stderr, rf"tracking PID {target.pid}")
        go.touch()
        assert target.wait(timeout=60) == 0
        err = zym.stderr.read()
        assert zym.wait(timeout=60) == 0, err
    finally:
        kill(target)
        kill(zym)
    files = rotated(out)
    parts = check_partition(files, iters)
    assert sum(1 for calls, _ in parts if calls.height) >= 2
    assert parts[0][1]["extra"]["labels"]["process"] == "python" or parts[0][1]["extra"][
        "labels"]["process"].startswith("python")
