"""`zym capture -- python ...` with both collectors: real eBPF uprobes (root, BCC) on a libcuda
stand-in and the CUPTI agent on a libcupti stand-in, joined into one capture with stacks.

The stand-in CUPTI counts time from the epoch (CLOCK_REALTIME, as the H200's did), eBPF from
boot (CLOCK_MONOTONIC): the clock fit and the join run on real clocks and real uprobe timing."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from ebpf_env import ebpf_unavailable, line_markers
from zym.analysis import analyze
from zym.schemas import open_capture

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "e2e_workload.py"
ITERS = 20


pytestmark = pytest.mark.ebpf


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    reason = ebpf_unavailable()
    if reason:
        pytest.skip(f"eBPF unavailable: {reason}")
    cc = shutil.which("gcc") or shutil.which("cc")
    d = tmp_path_factory.mktemp("e2e")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(d / "libcuda.so.1"),
                    str(HERE.parent / "ebpf" / "fakecuda.c")], check=True)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(d / "libcupti.so.13"),
                    str(HERE / "fakecupti.c"), "-lpthread"], check=True)
    return d


def test_zym_capture_joins_gpu_work_to_python_lines(libs, tmp_path):
    out = tmp_path / "trace.parquet"
    env = {**os.environ, "FAKECUDA": str(libs / "libcuda.so.1"), "ITERS": str(ITERS),
           "ZYM_CUPTI_LIB": str(libs / "libcupti.so.13"), "ZYM_CUPTI_EAGER": "1",
           "INIT_SLEEP": "0.5"}
    proc = subprocess.run([sys.executable, "-m", "zym.cli.main", "capture", "-o", str(out), "--",
                           sys.executable, str(WORKLOAD)], capture_output=True, text=True, check=False,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "100.0% of GPU time with its Python stack" in proc.stderr, proc.stderr
    assert not (tmp_path / "trace.parquet.cupti").exists()
    cap = open_capture(out)
    calls, gpu = cap.load("call"), cap.load("gpu")
    launches = ITERS * 2 + ITERS * 3  # main thread: step(2), worker: step(3), ITERS times
    assert gpu.filter(pl.col("kind") == "kernel").height == launches
    assert gpu.filter(pl.col("kind") == "sync").height == 2 * ITERS
    joined = cap.meta.extra["cupti"]["join"]
    assert joined["matched_by_time"] == launches + 2 * ITERS and joined["kind_mismatch"] == 0
    assert joined["cupti_unclaimed"] == 0
    fit = next(iter(cap.meta.extra["cupti"]["clock_fit"].values()))
    assert fit["offset_ns"] < -10**18  # epoch -> boot
    # every kernel's call path ends at the @launch line, every sync's at @sync
    m = line_markers(WORKLOAD)
    paths = analyze(out, window="all").call_paths.paths
    kernels = paths.filter(pl.col("kernels") > 0)
    assert kernels["user_line"].unique().to_list() == [m["launch"]]
    assert kernels["kernels"].sum() == launches
    assert paths.filter(pl.col("path_id") == -1).height == 0
    assert calls.filter(pl.col("name") == "cuLaunchKernel")["correlation_id"].null_count() == 0


def test_finalize_elsewhere_joins_the_kept_spools(libs, tmp_path):
    # a lean GPU host keeps <output>.raw/ and <output>.cupti/; --finalize joins them here
    out = tmp_path / "trace.parquet"
    env = {**os.environ, "FAKECUDA": str(libs / "libcuda.so.1"), "ITERS": "5",
           "ZYM_CUPTI_LIB": str(libs / "libcupti.so.13"), "ZYM_CUPTI_EAGER": "1",
           "INIT_SLEEP": "0.5"}
    run = subprocess.run([sys.executable, "-m", "zym.cli.main", "capture", "-o", str(out),
                          "--keep-raw", "--", sys.executable, str(WORKLOAD)],
                         capture_output=True, text=True, check=False, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "trace.parquet.raw").is_dir() and (tmp_path / "trace.parquet.cupti").is_dir()
    again = tmp_path / "again.parquet"
    fin = subprocess.run([sys.executable, "-m", "zym.cli.main", "capture", "--finalize",
                          str(tmp_path / "trace.parquet.raw"), "-o", str(again)],
                         capture_output=True, text=True, check=False, timeout=120)
    assert fin.returncode == 0, fin.stderr
    assert "100.0% of GPU time with its Python stack" in fin.stderr
    assert open_capture(again).load("gpu").filter(pl.col("kind") == "kernel").height == 25


def _interval_files(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f"{out.stem}-*{out.suffix}"),
                  key=lambda p: int(p.stem.rsplit("-", 1)[1]))


def check_gpu_intervals(files: list[Path], covered: int | None = None
                        ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Each file's GPU records belong to its own calls (same correlation ids), each call's
    entry lies in its file's interval, and (in the first ``covered`` files: all by default)
    all its GPU time has a Python stack; returns all calls and GPU records."""
    calls, gpus = [], []
    for i, f in enumerate(files):
        cap = open_capture(f)
        iv = cap.meta.extra["interval"]
        call = cap.load("call")
        gpu = cap.load("gpu")
        probed = call.filter(pl.col("stack_id").is_not_null())
        assert probed["ts_ns"].is_between(iv["start_mono_ns"], iv["end_mono_ns"],
                                          closed="left").all(), f
        if gpu.height:
            assert gpu.join(call, on=["pid", "correlation_id"], how="anti").height == 0, f
            if covered is None or i < covered:
                cover = cap.meta.extra["cupti"]["stack_coverage"]
                assert cover["gpu_time_with_stack_pct"] == 100.0, f
            assert not gpu["name"].str.starts_with("kernel@").any(), f
            gpus.append(gpu)
        calls.append(call)
    return pl.concat(calls, how="diagonal_relaxed"), pl.concat(gpus, how="diagonal_relaxed")


def _rotate_workload(libs: Path, out: Path, iters: int, init_sleep: float
                     ) -> subprocess.CompletedProcess:
    """`zym capture --rotate 400ms` of the e2e workload (``iters`` steps after
    ``init_sleep`` s), with both stand-ins; it must succeed."""
    env = {**os.environ, "FAKECUDA": str(libs / "libcuda.so.1"), "ITERS": str(iters),
           "ZYM_CUPTI_LIB": str(libs / "libcupti.so.13"), "ZYM_CUPTI_EAGER": "1",
           "INIT_SLEEP": str(init_sleep), "STEP_SLEEP": "0.01", "ZYM_CUPTI_FLUSH_MS": "200"}
    proc = subprocess.run([sys.executable, "-m", "zym.cli.main", "capture", "--rotate", "400ms",
                           "-o", str(out), "--", sys.executable, str(WORKLOAD)],
                          capture_output=True, text=True, check=False, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_rotate_shares_the_gpu_side_out_among_the_files(libs, tmp_path):
    iters = 120
    out = tmp_path / "svc.parquet"
    proc = _rotate_workload(libs, out, iters, 0.5)
    files = _interval_files(out)
    calls, gpu = check_gpu_intervals(files)
    assert sum(1 for f in files if open_capture(f).load("call").height) >= 3
    launches = iters * 2 + iters * 3   # the workload: step(2) and step(3), iters times each
    kernels = gpu.filter(pl.col("kind") == "kernel")
    assert kernels.height == launches and kernels["correlation_id"].n_unique() == launches
    assert gpu.filter(pl.col("kind") == "sync").height == 2 * iters
    assert calls.filter(pl.col("name") == "cuLaunchKernel").height == launches
    assert not (tmp_path / "svc.parquet.cupti").exists()
    assert (f"GPU: {launches} kernels/copies/memsets in the files written, 100.0% of their GPU "
            "time with its Python stack") in proc.stderr, proc.stderr


def test_rotate_writes_the_intervals_before_the_first_gpu_work(libs, tmp_path):
    # On the H200 the agent spools its header when CUDA starts, seconds before the first kernel
    # (torch's import, the model's build): intervals taken then have a spool and no GPU record,
    # and were not written (their raw calls kept, "cannot write ... ('pid')")
    iters = 20
    out = tmp_path / "svc.parquet"
    proc = _rotate_workload(libs, out, iters, 2.5)
    assert "cannot write" not in proc.stderr, proc.stderr
    assert not list(tmp_path.glob("svc.parquet.raw-*"))
    files = _interval_files(out)
    idle = [f for f in files if open_capture(f).load("gpu").height == 0]
    assert len(idle) >= 3   # written, and say which process spooled (no GPU work yet)
    assert all(open_capture(f).meta.extra["nvtx"]["recording"] for f in idle)
    _, gpu = check_gpu_intervals(files)
    assert gpu.filter(pl.col("kind") == "kernel").height == iters * 5


def test_rotate_cut_short_stops_the_agents_still_running_and_keeps_their_records(libs, tmp_path):
    """--duration ends the capture while the program runs on (its worker thread ignores the
    SIGINT): the last file still gets every kernel of every call recorded, the agent still
    running is stopped before it is read (no error from it when the spool folder goes)."""
    out = tmp_path / "svc.parquet"
    env = {**os.environ, "FAKECUDA": str(libs / "libcuda.so.1"), "ITERS": "100000",
           "ZYM_CUPTI_LIB": str(libs / "libcupti.so.13"), "ZYM_CUPTI_EAGER": "1",
           "INIT_SLEEP": "0.5", "STEP_SLEEP": "0.01", "ZYM_CUPTI_FLUSH_MS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "zym.cli.main", "capture", "--rotate", "1s",
                             "--duration", "3", "--keep-raw", "-o", str(out), "--", sys.executable,
                             str(WORKLOAD)], stdout=subprocess.DEVNULL,
                            stderr=(tmp_path / "err").open("w"), env=env,
                            start_new_session=True)   # the program outlives zym: files, not pipes
    try:
        rc = proc.wait(timeout=180)
        time.sleep(1.5)   # the program's flush thread would roll into the removed folder now
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
    stderr = (tmp_path / "err").read_text()
    assert rc == 0, stderr
    assert "still running after SIGINT" in stderr   # the case this test is about
    files = _interval_files(out)
    # the last file also holds GPU work launched after the probes left (no stack for it)
    calls, gpu = check_gpu_intervals(files, covered=len(files) - 1)
    launches = calls.filter(pl.col("name") == "cuLaunchKernel")
    kernels = gpu.filter(pl.col("kind") == "kernel")
    assert launches.height > 100
    # every recorded launch has its kernel (some kernels more: launched after the probes left)
    assert launches.join(kernels, on=["pid", "correlation_id"], how="anti").height == 0
    assert "zym-cupti-flush" not in stderr and "CUPTI collector" not in stderr, stderr
    # the agent of the program zym left running was stopped (SIGUSR2: flushed, footer written)
    from zym.capture.cupti.agent import read_chunks

    newest = max((tmp_path / "svc.parquet.cupti").glob("cupti-*.spool"))
    footers = [json.loads(p) for k, _, p in read_chunks(str(newest)) if k == "footer"]
    assert [f["reason"] for f in footers] == ["signal"], newest
