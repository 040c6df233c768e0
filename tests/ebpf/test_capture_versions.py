"""`zym capture -- python workload.py` under every CPython 3.10-3.13 pyenv has: every call
recorded once, with its exact Python stack, arguments and (for syncs) duration."""
from __future__ import annotations

import os
from collections import Counter

import polars as pl
import pytest
from ebpf_helpers import (
    PYENV_VERSIONS,
    WORKLOAD,
    calls_with_stacks,
    markers,
    python_for,
    zym_capture,
)
from zym.schemas import open_capture

ITERS = 6
SYNC_US = 20_000
# API -> (marker of its line in the method, method, marker of the caller's line in forward)
EXPECTED = {
    "cuLaunchKernel": ("launch", "Model.launch", "forward_launch"),
    "cuLaunchKernelEx": ("launch_ex", "Model.launch", "forward_launch"),
    "cuMemsetD32Async": ("memset", "Model.launch", "forward_launch"),
    "cuMemcpyDtoHAsync_v2": ("copy", "Model.copy_back", "forward_copy"),
    "cuStreamSynchronize": ("sync", "Model.copy_back", "forward_copy"),
}


def expected_stack(api: str, main_thread: bool, version: str) -> list[tuple[str, str, int]]:
    """The innermost workload frames of a call: (function, file, line). 3.10 code objects
    have no qualified name, so methods appear by their bare name there."""
    m = markers()
    line_marker, method, caller = EXPECTED[api]
    frames = [(method, m[line_marker]), ("Model.forward", m[caller]),
              ("worker", m["worker_forward"])]
    if main_thread:
        frames += [("main", m["main_worker"]), ("<module>", m["module_main"])]
    if version == "3.10":
        frames = [(name.split(".")[-1], line) for name, line in frames]
    return [(name, str(WORKLOAD), line) for name, line in frames]


@pytest.mark.ebpf
@pytest.mark.parametrize("version", PYENV_VERSIONS)
def test_exact_stacks_per_python_version(version, fake_cuda, tmp_path):
    python = python_for(version)
    if python is None:
        pytest.skip(f"no CPython {version} under pyenv")
    run = zym_capture(["--return-probes", "--", python, str(WORKLOAD)], tmp_path / "cap.parquet", env={
        "FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(fake_cuda),
        "ITERS": str(ITERS), "SYNC_US": str(SYNC_US)})
    assert run.rc == 0, run.stderr
    assert f"CPython {version}" in run.stderr
    calls = calls_with_stacks(run.output)

    # Every call exactly once: 2 threads x ITERS x one call per API.
    assert Counter(c["name"] for c in calls) == {api: 2 * ITERS for api in EXPECTED}
    pids = {c["pid"] for c in calls}
    assert len(pids) == 1
    main_tid = pids.pop()
    assert len({c["tid"] for c in calls}) == 2

    for c in calls:
        kind, api, file, line = c["stack"][0]
        assert (kind, api, file, line) == ("cuda_api", c["name"], None, None)
        python_frames = [(n, f, ln) for k, n, f, ln in c["stack"][1:]]
        main = c["tid"] == main_tid
        want = expected_stack(c["name"], main, version)
        assert python_frames[:len(want)] == want, (c["name"], python_frames)
        if main:
            assert len(python_frames) == len(want)     # nothing above <module>
        else:   # then threading's bootstrap frames, and nothing else
            rest = python_frames[len(want):]
            assert rest and all(f.endswith("threading.py") for _, f, _ in rest)

    by_api = {api: [c for c in calls if c["name"] == api] for api in EXPECTED}
    assert {c["stream_id"] for c in by_api["cuLaunchKernel"]} == {0x5}        # stack argument
    assert {c["stream_id"] for c in by_api["cuLaunchKernelEx"]} == {0x9}      # via the config
    assert {c["size_bytes"] for c in by_api["cuMemsetD32Async"]} == {1024}    # 256 x 4 bytes
    assert {(c["size_bytes"], c["copy_kind"], c["stream_id"])
            for c in by_api["cuMemcpyDtoHAsync_v2"]} == {(4096, "DtoH", 0x7)}
    sync_ms = [c["dur_ns"] / 1e6 for c in by_api["cuStreamSynchronize"]]
    # at least the stand-in's sleep; the upper bound leaves room for a loaded 2-core CI box
    assert all(SYNC_US / 1000 <= ms < 5 * SYNC_US / 1000 for ms in sync_ms), sync_ms
    assert all(c["dur_ns"] == 0 for c in by_api["cuLaunchKernel"])           # no return probe

    # Each frame of the workload carries the text of its line, as the file has it.
    text = WORKLOAD.read_text().splitlines()
    frames = open_capture(run.output).load("frame").filter(pl.col("file") == str(WORKLOAD))
    assert frames.height >= len(EXPECTED)
    for row in frames.iter_rows(named=True):
        assert row["source"] == text[row["line"] - 1].strip()[:200], row


DISTRO_PYTHON = "/usr/bin/python3"
# Code objects are read from the live process; one whose first stack comes milliseconds before
# it exits may be gone by then (documented in docs/capture.md). Short workloads linger.
LINGER = "0.3"


@pytest.mark.ebpf
def test_statically_linked_distribution_python(fake_cuda, tmp_path):
    """Debian's /usr/bin/python3 has the interpreter in the executable (no libpython)."""
    if not os.path.exists(DISTRO_PYTHON):
        pytest.skip("no /usr/bin/python3")
    run = zym_capture(["--return-probes", "--", DISTRO_PYTHON, str(WORKLOAD)], tmp_path / "cap.parquet", env={
        "FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(fake_cuda), "ITERS": "2",
        "SYNC_US": "1000", "LINGER": LINGER})
    assert run.rc == 0, run.stderr
    assert f"({os.path.realpath(DISTRO_PYTHON)})" in run.stderr
    calls = calls_with_stacks(run.output)
    assert len(calls) == 2 * 2 * len(EXPECTED)
    for c in calls:
        want = expected_stack(c["name"], False, "3.11")
        got = [(n, f, ln) for _, n, f, ln in c["stack"][1:]]
        assert got[:len(want)] == want


SHIM_WORKLOAD = WORKLOAD.with_name("shim_workload.py")


@pytest.mark.ebpf
@pytest.mark.parametrize("version", PYENV_VERSIONS)
def test_stacks_through_many_c_to_python_hops_are_whole(version, fake_cuda, tmp_path):
    """12 nested calls from C back into Python (map(level, ...)): every Python frame of the
    call's stack is there, none flagged truncated, whatever the walk reads one by one and
    what it copies in bulk (a torch model nests nn.Module calls the same way)."""
    from ebpf_env import line_markers

    python = python_for(version)
    if python is None:
        pytest.skip(f"no CPython {version} under pyenv")
    run = zym_capture(["--", python, str(SHIM_WORKLOAD)], tmp_path / "cap.parquet", env={
        "FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(fake_cuda), "ITERS": "3",
        "HOPS": "12"})
    assert run.rc == 0, run.stderr
    m = line_markers(SHIM_WORKLOAD)
    calls = calls_with_stacks(run.output)
    assert len(calls) == 3
    want = ([("level", m["leaf"])] + [("level", m["hop"])] * 12
            + [("main", m["main"]), ("<module>", m["module"])])
    for c in calls:  # stack: (kind, name, file, line), innermost first
        got = [(name, line) for kind, name, _, line in c["stack"] if kind == "python"]
        assert got == want, got
        assert not [f for f in c["stack"] if "truncated" in f[1]]
