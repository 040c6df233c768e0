"""The driver's memory calls (cuMemAlloc_v2, cuMemFree_v2, cuMemHostAlloc) captured with their
Python lines, sizes and durations, and named by memory.allocator-churn: what
torch.cuda.empty_cache() per request, or pin_memory() per request, cost a service."""
from __future__ import annotations

import textwrap

import pytest
from ebpf_helpers import calls_with_stacks, zym_capture

REQUESTS, FREE_US = 6, 3000
SERVICE = textwrap.dedent(f"""
    import ctypes, os, time
    cuda = ctypes.CDLL(os.environ["FAKECUDA"])
    cuda.cuInit(0)
    time.sleep(1.0)          # as CUDA's own start: zym attaches to the library meanwhile
    cuda.fakecuda_set_sync_us({FREE_US})
    ptr = ctypes.c_uint64(0)
    host = ctypes.c_void_p(0)

    def handle(i):
        cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))       # @alloc
        cuda.cuMemHostAlloc(ctypes.byref(host), ctypes.c_size_t(4096), 0)    # @pin
        cuda.cuLaunchKernel(None, 1, 1, 1, 32, 1, 1, 0, ctypes.c_void_p(5), None, None)
        cuda.cuMemFree_v2(ptr)                                               # @free

    for i in range({REQUESTS}):
        handle(i)
    time.sleep(0.3)          # code objects are read from the live process
""")


@pytest.mark.ebpf
def test_memory_calls_are_captured_at_their_lines_and_named(fake_cuda, tmp_path):
    script = tmp_path / "service.py"
    script.write_text(SERVICE)
    lines = {m: i for i, text in enumerate(SERVICE.splitlines(), 0)
             for m in ("alloc", "pin", "free") if f"# @{m}" in text}
    run = zym_capture(["--", "python3", str(script)], tmp_path / "cap.parquet",
                      env={"FAKECUDA": "libcuda.so.1", "LD_LIBRARY_PATH": str(fake_cuda)})
    assert run.rc == 0, run.stderr
    calls = calls_with_stacks(run.output)
    by = {}
    for c in calls:
        by.setdefault(c["name"], []).append(c)
    for api, marker in (("cuMemAlloc_v2", "alloc"), ("cuMemHostAlloc", "pin"),
                        ("cuMemFree_v2", "free")):
        assert len(by[api]) == REQUESTS, api
        assert {c["stack"][1][3] for c in by[api]} == {lines[marker] + 1}, api   # 1-based
    assert {c["size_bytes"] for c in by["cuMemAlloc_v2"]} == {1 << 20}
    assert {c["size_bytes"] for c in by["cuMemHostAlloc"]} == {4096}
    assert all(c["dur_ns"] >= FREE_US * 1000 for c in by["cuMemFree_v2"]), [
        c["dur_ns"] for c in by["cuMemFree_v2"]]   # return probe

    from zym.analysis import analyze
    from zym.rules import evaluate

    result = analyze(run.output, window="all")
    found = [f for f in evaluate(result) if f.rule_id == "memory.allocator-churn"]
    assert sorted(f.title.rsplit(": ", 1)[1] for f in found) == [
        "cuMemAlloc_v2", "cuMemFree_v2", "cuMemHostAlloc"]
    free = next(f for f in found if f.title.endswith("cuMemFree_v2"))
    assert free.evidence["count"] == REQUESTS
    assert free.evidence["stall_ns"] >= REQUESTS * FREE_US * 1000   # a free blocks
