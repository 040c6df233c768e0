"""What a capture costs, as the capture reports it, and the probe placement past ``endbr64``.

The libcuda stand-in is built as distributions build libraries (CET and frame pointers: every
function starts ``endbr64; push %rbp``), so zym probes the ``push`` (emulated) at +4 instead of
the ``endbr64`` (single-stepped), and must still read every argument right."""
from __future__ import annotations

import subprocess
import sys
from collections import Counter

import polars as pl
import pytest
from ebpf_helpers import HERE, WORKLOAD, zym_capture
from zym.analysis import analyze
from zym.capture.prologue import ENDBR64
from zym.schemas import open_capture

ITERS = 5
APIS = ("cuLaunchKernel", "cuLaunchKernelEx", "cuMemsetD32Async", "cuMemcpyDtoHAsync_v2",
        "cuStreamSynchronize")
pytestmark = pytest.mark.ebpf


@pytest.fixture(scope="module")
def cet_cuda(tmp_path_factory):
    d = tmp_path_factory.mktemp("cetcuda")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-fcf-protection=full",
                    "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer",
                    "-o", str(d / "libcuda.so.1"), str(HERE / "fakecuda.c")], check=True)
    return d


def _symbol_bytes(lib, symbol: str) -> bytes:
    out = subprocess.run(["objdump", "-d", f"--disassemble={symbol}", str(lib)],
                         capture_output=True, text=True, check=True).stdout
    hexes = []
    for line in out.splitlines()[7:]:
        parts = line.split("\t")
        if len(parts) >= 2:
            hexes += parts[1].split()
    return bytes.fromhex("".join(hexes[:8]))


def test_probes_past_endbr64_read_the_same_arguments_and_report_their_cost(cet_cuda, tmp_path):
    lib = cet_cuda / "libcuda.so.1"
    assert _symbol_bytes(lib, "cuLaunchKernel").startswith(ENDBR64 + b"\x55")   # push %rbp
    run = zym_capture(["--", sys.executable, str(WORKLOAD)], tmp_path / "cap.parquet", env={
        "FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(cet_cuda), "ITERS": str(ITERS),
        "SYNC_US": "2000"})
    assert run.rc == 0, run.stderr
    cap = open_capture(run.output)
    calls = cap.load("call")
    assert Counter(calls["name"]) == {api: 2 * ITERS for api in APIS}
    by = {api: calls.filter(pl.col("name") == api) for api in APIS}
    assert set(by["cuLaunchKernel"]["stream_id"]) == {0x5}          # 9th argument: the stack
    assert set(by["cuLaunchKernelEx"]["stream_id"]) == {0x9}
    assert set(by["cuMemsetD32Async"]["size_bytes"]) == {1024}
    assert set(by["cuMemcpyDtoHAsync_v2"]["size_bytes"]) == {4096}
    # CUPTI would give syncs their duration: no return probes, so none here
    assert set(by["cuStreamSynchronize"]["dur_ns"]) == {0}

    extra = cap.meta.extra
    place = extra["probe_placement"]["cuLaunchKernel"]
    assert (place["offset"], place["emulated"]) == (4, True)
    assert place["first_bytes"].startswith(_symbol_bytes(lib, "cuLaunchKernel").hex())
    cost = extra["capture_cost"]
    n = calls.height
    assert cost["calls_seen"] == n and cost["probe_hits"] >= n
    # the memory calls' returns are probed even with CUPTI (it records none): attached, and
    # not hit, since this workload makes no memory call
    assert cost["return_probe_hits"] == 0
    assert cost["dropped_events"] == 0
    assert cost["bpf_ns_per_call"] > 0
    assert cost["ring_bytes"] >= n * 80                # 72-byte records with 8-byte headers
    assert cost["consumer_cpu_ns"] > 0
    emulated = cost["trap_ns_emulated"]
    if emulated is not None:       # calibrated on this interpreter's functions
        for api, kind in (("cuLaunchKernel", "launch"), ("cuStreamSynchronize", "sync")):
            assert cost[f"added_ns_per_call_{kind}"] > cost["bpf_ns_per_call"] * 0.1
        assert cost["added_ns_per_call"] > emulated
    # analyze shows it in its header: the collector's figures, and their sum with CUPTI's
    # (none here: no GPU side) as the cost the replay takes out
    facts = analyze(run.output).capture_facts()
    probes = cost.get("added_ns_per_call") or 0
    assert facts["capture_cost"] == cost | {"total_ns_per_call": int(probes) if probes > 0 else 0}


def test_sampled_walks_still_record_every_call(cet_cuda, tmp_path):
    run = zym_capture(["--max-overhead", "0.001%", "--", sys.executable, str(WORKLOAD)],
                      tmp_path / "cap.parquet", env={
                          "FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(cet_cuda),
                          "ITERS": "40", "SYNC_US": "20000"})
    assert run.rc == 0, run.stderr
    cap = open_capture(run.output)
    calls = cap.load("call")
    assert Counter(calls["name"]) == {api: 2 * 40 for api in APIS}    # every call recorded
    cost = cap.meta.extra["capture_cost"]
    assert cost["max_overhead_pct"] == 0.001
    # a budget no walk fits: the sampling period grew, so some calls have no stack
    assert cost["sample_periods"] and max(cost["sample_periods"]) > 1
    assert 0 < calls["stack_id"].null_count() < calls.height
