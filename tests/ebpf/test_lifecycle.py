"""`zym capture` around a target's life: attach by PID to a process that loads CUDA later,
the target dying or being interrupted mid-capture, forked and exec'd children, a target with
no CUDA, --sample and runtime+driver nesting."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from ebpf_helpers import (
    WORKLOAD,
    calls_with_stacks,
    kill,
    markers,
    start_zym,
    wait_for_line,
    zym_capture,
)
from zym.schemas import open_capture

APIS = ("cuLaunchKernel", "cuLaunchKernelEx", "cuMemsetD32Async", "cuMemcpyDtoHAsync_v2",
        "cuStreamSynchronize")
pytestmark = pytest.mark.ebpf


def start_workload(env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(WORKLOAD)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    assert proc.stdout.readline().startswith("pid ")
    return proc


def workload_lines(call: dict) -> list[int]:
    return [line for kind, _, file, line in call["stack"] if file == str(WORKLOAD)]


def test_attach_to_pid_then_library_loaded_later(fake_cuda, tmp_path):
    # A library the linker cannot know of (absolute path, loaded after the attach): zym must
    # find it in /proc/PID/maps while capturing.
    lib = tmp_path / "private" / "libcuda.so.1"
    lib.parent.mkdir()
    shutil.copy(fake_cuda / "libcuda.so.1", lib)
    go = tmp_path / "go"
    target = start_workload({"FAKECUDA": str(lib), "GO_FILE": str(go), "ITERS": "4",
                             "SYNC_US": "5000", "INIT_SLEEP": "0.5"})  # CUDA init takes longer
    zym = start_zym(["--pid", str(target.pid)], tmp_path / "cap.parquet")
    try:
        wait_for_line(zym.stderr, rf"tracking PID {target.pid}")
        go.touch()
        assert target.wait(timeout=30) == 0
        err = zym.stderr.read()
        assert zym.wait(timeout=30) == 0, err
    finally:
        kill(target)
        kill(zym)
    # every driver symbol zym probes that the stand-in exports (read from its dynamic symbols)
    from zym.capture.elf import ElfFile
    from zym.capture.probes import DRIVER, probes_for

    names = {p.symbol for _, p in probes_for(DRIVER)}
    want = len(ElfFile(lib).symbols(names))
    assert want >= 10 and f"attached {want} probes to {lib}" in err
    calls = calls_with_stacks(tmp_path / "cap.parquet")
    assert Counter(c["name"] for c in calls) == {api: 8 for api in APIS}
    m = markers()
    syncs = [c for c in calls if c["name"] == "cuStreamSynchronize"]
    assert all(workload_lines(c)[:3] == [m["sync"], m["forward_copy"], m["worker_forward"]]
               for c in syncs)


def test_target_killed_mid_capture(fake_cuda, tmp_path):
    target = start_workload({"FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(fake_cuda),
                             "ITERS": "100000", "SYNC_US": "2000"})
    zym = start_zym(["--pid", str(target.pid)], tmp_path / "cap.parquet")
    try:
        wait_for_line(zym.stderr, rf"tracking PID {target.pid}")
        time.sleep(1.0)
        target.kill()
        assert zym.wait(timeout=20) == 0, zym.stderr.read()
    finally:
        kill(target)
        kill(zym)
    calls = calls_with_stacks(tmp_path / "cap.parquet")
    assert len(calls) > 50
    assert all(workload_lines(c) for c in calls)      # every call has its Python stack


def test_sigint_leaves_an_analyzable_capture(fake_cuda, tmp_path):
    zym = start_zym(["--", sys.executable, str(WORKLOAD)], tmp_path / "cap.parquet",
                    env={"FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(fake_cuda),
                         "ITERS": "100000", "SYNC_US": "2000"})
    try:
        wait_for_line(zym.stderr, r"tracking PID")
        time.sleep(1.0)
        zym.send_signal(signal.SIGINT)
        err = zym.stderr.read()
        assert zym.wait(timeout=20) == 0, err
    finally:
        kill(zym)
    cap = open_capture(tmp_path / "cap.parquet")
    calls = cap.load("call")
    assert calls.height > 50 and calls["stack_id"].null_count() == 0
    assert cap.meta.dropped == {"ebpf_ringbuf": 0, "ebpf_ringbuf_stacks": 0,
                                "ebpf_ringbuf_native": 0}
    assert not (tmp_path / "cap.parquet.raw").exists()


def test_forked_and_execd_children_are_followed(fake_cuda, tmp_path):
    run = zym_capture(["--", sys.executable, str(WORKLOAD)], tmp_path / "cap.parquet", env={
        "FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(fake_cuda), "ITERS": "2",
        "SYNC_US": "1000", "FORK": "1", "LINGER": "0.3"})
    assert run.rc == 0, run.stderr
    calls = calls_with_stacks(run.output)
    by_pid = Counter(c["pid"] for c in calls)
    assert sorted(by_pid.values()) == [5, 10, 20]   # fork child, exec'd child, parent
    m = markers()
    fork_pid = next(pid for pid, n in by_pid.items() if n == 5)
    assert all(m["fork_child"] in workload_lines(c) for c in calls if c["pid"] == fork_pid)
    assert all(workload_lines(c) for c in calls)


def test_target_without_cuda_exits_2(tmp_path):
    run = zym_capture(["--", sys.executable, "-c", "print('no gpu here')"],
                      tmp_path / "cap.parquet")
    assert run.rc == 2
    assert "no CUDA library (libcuda.so) was mapped" in run.stderr
    assert not (tmp_path / "cap.parquet").exists()


def test_pid_that_is_not_python_exits_2(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        run = zym_capture(["--pid", str(sleeper.pid)], tmp_path / "cap.parquet")
    finally:
        kill(sleeper)
    assert run.rc == 2
    assert f"PID {sleeper.pid} (sleep) is not a CPython process" in run.stderr


def test_sample_walks_every_nth_stack_and_counts_every_call(fake_cuda, tmp_path):
    run = zym_capture(["--sample", "3", "--", sys.executable, str(WORKLOAD)],
                      tmp_path / "cap.parquet", env={
                          "FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(fake_cuda),
                          "ITERS": "6", "SYNC_US": "1000"})
    assert run.rc == 0, run.stderr
    cap = open_capture(run.output)
    calls = cap.load("call")
    assert calls.height == 2 * 6 * len(APIS)
    # per thread, calls 0, 3, 6, ... of its 30 get a stack
    assert calls["stack_id"].is_not_null().sum() == 2 * 10
    assert cap.meta.extra["sample"] == 3


def test_runtime_call_and_its_driver_call_are_one_event(fake_cuda, tmp_path):
    run = zym_capture(["--runtime-api", "--", sys.executable, str(WORKLOAD)],
                      tmp_path / "cap.parquet", env={
                          "FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(fake_cuda),
                          "CUDART": str(fake_cuda / "libcudart.so.12"), "ITERS": "3",
                          "SYNC_US": "5000"})
    assert run.rc == 0, run.stderr
    cap = open_capture(run.output)
    calls = calls_with_stacks(run.output)
    counts = Counter(c["name"] for c in calls)
    # the runtime calls appear under their own name, their nested driver calls not at all
    assert counts == {**{api: 6 for api in APIS}, "cudaLaunchKernel": 6,
                      "cudaStreamSynchronize": 6}
    assert cap.meta.extra["nested_calls"] == 12
    m = markers()
    rt_launch = [c for c in calls if c["name"] == "cudaLaunchKernel"]
    assert {c["stream_id"] for c in rt_launch} == {0x6}       # after two dim3 by value
    assert all(workload_lines(c)[0] == m["rt_launch"] for c in rt_launch)
    rt_sync = [c for c in calls if c["name"] == "cudaStreamSynchronize"]
    assert all(5 <= c["dur_ns"] / 1e6 < 100 for c in rt_sync)    # the stand-in sleeps 5 ms


def test_pid_of_an_unsupported_python_exits_2(tmp_path):
    from ebpf_helpers import python_for
    old = python_for("3.9")
    if old is None:
        pytest.skip("no CPython 3.9 under pyenv")
    target = subprocess.Popen([old, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        run = zym_capture(["--pid", str(target.pid)], tmp_path / "cap.parquet")
    finally:
        kill(target)
    assert run.rc == 2
    assert (f"PID {target.pid} runs Python 3.9; zym capture supports CPython "
            "3.10, 3.11, 3.12, 3.13") in run.stderr


def test_duration_stops_the_capture_and_leaves_the_target_running(fake_cuda, tmp_path):
    target = start_workload({"FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(fake_cuda),
                             "ITERS": "100000", "SYNC_US": "2000"})
    try:
        started = time.monotonic()
        run = zym_capture(["--pid", str(target.pid), "--duration", "1.5"], tmp_path / "c.parquet")
        assert run.rc == 0, run.stderr
        assert time.monotonic() - started < 20
        assert target.poll() is None        # detached, not killed
    finally:
        kill(target)
    cap = open_capture(tmp_path / "c.parquet")
    assert cap.load("call").height > 50
    assert cap.meta.source == f"pid {target.pid}"


def test_pid_attach_follows_children_forked_before(fake_cuda, tmp_path):
    # A Python parent (no CUDA itself) whose worker, started before the attach, uses the GPU.
    go = tmp_path / "go"
    parent = subprocess.Popen(
        [sys.executable, "-c", ("import subprocess, sys; "
                                f"sys.exit(subprocess.run([sys.executable, {str(WORKLOAD)!r}]).returncode)")],
        env={**os.environ, "FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(fake_cuda),
             "GO_FILE": str(go), "ITERS": "3", "SYNC_US": "1000", "LINGER": "0.3"})
    try:
        time.sleep(1.0)     # the worker is waiting for GO_FILE
        zym = start_zym(["--pid", str(parent.pid)], tmp_path / "cap.parquet")
        wait_for_line(zym.stderr, r"attached \d+ probes")   # after the children are adopted
        go.touch()
        assert parent.wait(timeout=30) == 0
        err = zym.stderr.read()
        assert zym.wait(timeout=30) == 0, err
    finally:
        kill(parent)
    calls = calls_with_stacks(tmp_path / "cap.parquet")
    assert Counter(c["name"] for c in calls) == {api: 6 for api in APIS}, err
    assert {c["pid"] for c in calls} != {parent.pid}
    assert all(workload_lines(c) for c in calls)
