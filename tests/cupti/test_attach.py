"""`zym run` + `zym capture --pid`: a running service recorded with its GPU side, twice, and
left as it was. Real eBPF uprobes (root, BCC) on a libcuda stand-in; the agent drives a libcupti
stand-in that records only what is enabled and counts its detaches (tests/cupti/fakecupti.c).

What the service launched is known independently: it logs the CLOCK_MONOTONIC time of each
launch itself (attach_workload.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from ebpf_env import line_markers
from test_capture_e2e import check_gpu_intervals, libs  # noqa: F401 - libs: a fixture
from zym.analysis import analyze
from zym.schemas import open_capture

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "attach_workload.py"
ZYM = [sys.executable, "-m", "zym.cli.main"]

pytestmark = pytest.mark.ebpf


def _wait_for(path: Path, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_capture_pid_switches_the_agent_on_then_off_twice(libs, tmp_path):  # noqa: F811
    agents, stop, log = tmp_path / "agents", tmp_path / "stop", tmp_path / "launches.log"
    env = {**os.environ, "FAKECUDA": str(libs / "libcuda.so.1"),
           "ZYM_CUPTI_LIB": str(libs / "libcupti.so.13"), "ZYM_CUPTI_EAGER": "1",
           "ZYM_AGENT_DIR": str(agents), "STOP_FILE": str(stop), "LOG_FILE": str(log)}
    svc = subprocess.Popen([*ZYM, "run", "--", sys.executable, str(WORKLOAD)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(agents / str(svc.pid) / "state")
        outs = []
        for name in ("first", "second"):   # on, off, on again, off
            out = tmp_path / f"{name}.parquet"
            proc = subprocess.run([*ZYM, "capture", "--pid", str(svc.pid), "--duration", "1.5",
                                   "-o", str(out)], env=env, capture_output=True, text=True,
                                  timeout=120, check=False)
            assert proc.returncode == 0, proc.stderr
            assert "100.0% of GPU time with its Python stack" in proc.stderr, proc.stderr
            assert not out.with_name(out.name + ".cupti").exists()
            outs.append(out)
            time.sleep(0.3)
    finally:
        stop.touch()
        stdout, stderr = svc.communicate(timeout=30)
    # the service ran to its end, with CUPTI detached twice and nothing left enabled
    assert svc.returncode == 0, stderr
    assert "finalized 2; kernel records on 0" in stdout, stdout
    launched = np.array(log.read_text().split(), dtype=np.int64)
    m = line_markers(WORKLOAD)
    for out in outs:
        cap = open_capture(out)
        calls = cap.load("call").filter(pl.col("name") == "cuLaunchKernel").sort("ts_ns")
        kernels = cap.load("gpu").filter(pl.col("kind") == "kernel")
        # the service's own log: which of its launches the window's first and last calls are
        first, last = (np.searchsorted(launched, calls["ts_ns"][[0, -1]].to_numpy(), "right") - 1)
        in_window = int(last - first + 1)
        assert in_window > 200                      # 1.5 s of a service launching ~2 per ms
        lost = cap.meta.dropped.get("ebpf_ringbuf", 0)  # counted, never silent
        assert calls.height + lost == in_window, (calls.height, lost, in_window, cap.meta.dropped)
        assert kernels.height == in_window          # each with its kernel (CUPTI was on)
        assert calls["correlation_id"].null_count() == lost
        paths = analyze(out, window="all").call_paths.paths
        with_kernels = paths.filter(pl.col("kernels") > 0)
        assert with_kernels["user_line"].unique().to_list() == [m["attach_launch"]]
        assert with_kernels["kernels"].sum() == in_window - lost


def test_capture_pid_without_the_agent_says_why_and_records_the_cpu_side(libs, tmp_path):  # noqa: F811
    stop, log = tmp_path / "stop", tmp_path / "launches.log"
    env = {**os.environ, "FAKECUDA": str(libs / "libcuda.so.1"),
           "ZYM_CUPTI_LIB": str(libs / "libcupti.so.13"), "STOP_FILE": str(stop),
           "LOG_FILE": str(log)}
    svc = subprocess.Popen([sys.executable, str(WORKLOAD)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        out = tmp_path / "cpu.parquet"
        proc = subprocess.run([*ZYM, "capture", "--pid", str(svc.pid), "--duration", "1",
                               "-o", str(out)], env=env, capture_output=True, text=True,
                              timeout=120, check=False)
    finally:
        stop.touch()
        svc.communicate(timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert f"PID {svc.pid} runs without zym's agent: CPU side only" in proc.stderr
    assert "zym run -- COMMAND" in proc.stderr
    cap = open_capture(out)
    assert cap.load("call").filter(pl.col("name") == "cuLaunchKernel").height > 100
    assert cap.load("gpu").height == 0


def test_capture_pid_rotate_gives_every_file_its_gpu_side(libs, tmp_path):  # noqa: F811
    agents, stop, log = tmp_path / "agents", tmp_path / "stop", tmp_path / "launches.log"
    env = {**os.environ, "FAKECUDA": str(libs / "libcuda.so.1"),
           "ZYM_CUPTI_LIB": str(libs / "libcupti.so.13"), "ZYM_CUPTI_EAGER": "1",
           "ZYM_AGENT_DIR": str(agents), "STOP_FILE": str(stop), "LOG_FILE": str(log),
           "ZYM_CUPTI_FLUSH_MS": "200"}
    svc = subprocess.Popen([*ZYM, "run", "--", sys.executable, str(WORKLOAD)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = tmp_path / "svc.parquet"
    try:
        _wait_for(agents / str(svc.pid) / "state")
        proc = subprocess.run([*ZYM, "capture", "--pid", str(svc.pid), "--duration", "2.5",
                               "--rotate", "500ms", "-o", str(out)], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
    finally:
        stop.touch()
        stdout, stderr = svc.communicate(timeout=30)
    assert svc.returncode == 0, stderr
    assert "finalized 1; kernel records on 0" in stdout, stdout
    files = sorted(tmp_path.glob("svc-*.parquet"))
    calls, gpu = check_gpu_intervals(files)
    assert sum(1 for f in files if open_capture(f).load("call").height) >= 3
    launches = calls.filter(pl.col("name") == "cuLaunchKernel").sort("ts_ns")
    lost = sum(open_capture(f).meta.dropped.get("ebpf_ringbuf", 0) for f in files)
    # the service's own log: every launch between the first and last one recorded is there,
    # each with its kernel, in one file
    logged = np.array(log.read_text().split(), dtype=np.int64)
    first, last = np.searchsorted(logged, launches["ts_ns"][[0, -1]].to_numpy(), "right") - 1
    assert launches.height + lost == int(last - first + 1) > 500
    kernels = gpu.filter(pl.col("kind") == "kernel")
    assert kernels.height == launches.height == kernels["correlation_id"].n_unique(), \
        _without_kernel(files, launches, kernels)
    assert not out.with_name(out.name + ".cupti").exists()


def _without_kernel(files: list[Path], launches: pl.DataFrame, kernels: pl.DataFrame) -> str:
    """Where the launches without a kernel record lie: their file's interval, the GPU window."""
    lone = launches.join(kernels.select("pid", "correlation_id"),
                         on=["pid", "correlation_id"], how="anti")
    metas = [open_capture(f).meta.extra for f in files]
    where = [(m["interval"], m.get("gpu_window"), m["interval"].get("gpu")) for m in metas]
    return f"launches without a kernel: {lone.to_dicts()}; files: {where}"
