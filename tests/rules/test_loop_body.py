"""The batching fix of copies made in a loop (``saving: {model: batch, body: once}``): where
the loop's other calls are all the enclosing function's own torch ops, batching the copies
batches those ops too, so they run once; where the loop calls another user function (a
model) or waits elsewhere (a value read per item), they stay.

CaptureBuilder times (rules/testing.py): a call lasts its ``cpu_us`` and the next starts 1 us
after it; a pageable host-to-device copy is a 4 us ``cudaMemcpyAsync`` that returns once its 2
us GPU copy is done, then a 2 us ``cudaStreamSynchronize``: 8 us with the gaps. Each kernel
launch here is 5 us: 6 us with its gap.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from zym import rules
from zym.rules.testing import CaptureBuilder

US = 1_000
SERVE = [("python", "main", "app.py", 1), ("python", "serve", "app.py", 10)]
HANDLE = {"kineto": SERVE + [("python", "handle", "app.py", 20)],
          "ebpf": SERVE + [("python", "handle", "app.py", 22)]}
COLLATE = {"kineto": [("python", "collate", "app.py", 30)],  # a frame: its first line
           "ebpf": [("python", "collate", "app.py", 33)]}    # the executing line
EMBED = [("python", "embed", "model.py", 5)]
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
ITEMS, REQUESTS = 16, 3
COPY_US = 8          # a copy and its sync, with their gaps
BODY_US = 2 * 6      # the cast and the offset: two launches with their gaps
GPU_US = 0.001       # their kernels: 1 ns each


def service(style: str, per_item: str = "", host_mem: str = "pageable",
            gpu_us: float = GPU_US) -> CaptureBuilder:
    """Per request: a collate loop over ITEMS items (each uploaded by a pageable copy, then
    cast and offset by two kernels on the GPU; ``per_item``: ``embed`` also calls another
    user function on the item, ``item`` also reads a value back), one ``cat``, then a
    forward of 5 GEMMs of 50 us (the next request's first copy waits for them). ``host_mem``
    ``pinned``: the copy returns once queued and its sync does the waiting, as a pageable
    copy's ``cudaMemcpyAsync`` does in a Kineto trace. ``gpu_us``: each cast's and offset's
    kernel."""
    b = CaptureBuilder()
    handle = HANDLE[style]
    here = handle + COLLATE[style]
    for _ in range(REQUESTS):
        with b.enclosing(handle), b.enclosing(here):
            for _ in range(ITEMS):
                b.copy(here, "HtoD", nbytes=4096, host_mem=host_mem)
                b.kernel(here + [("torch_op", "aten::to")], "cast", gpu_us=gpu_us)
                b.kernel(here + [("torch_op", "aten::add")], "add", gpu_us=gpu_us)
                if per_item == "embed":
                    with b.enclosing(here + EMBED):
                        b.kernel(here + EMBED, GEMM, gpu_us=1)
                elif per_item == "item":
                    b.scalar_readback(here)
            b.kernel(here + [("torch_op", "aten::cat")], "cat", gpu_us=1)
            for _ in range(5):
                b.kernel(handle + [("python", "forward", "model.py", 9)], GEMM, gpu_us=50)
    return b


def finding(b: CaptureBuilder, style: str):
    a = b.analysis(spans=style == "kineto")
    [f] = [f for f in rules.evaluate(a) if f.rule_id == "transfers.htod-in-loop"]
    return f


@pytest.mark.parametrize("style", ["kineto", "ebpf"])
def test_a_loop_of_the_functions_own_ops_runs_once_on_the_batch(style):
    """Each request's collate keeps its first item's copy (which waits for the previous
    request's forward), sync, cast and offset; the other 15 items' 20 us go: 3 x 15 x 20 us.
    Without the loop's ops it would be 3 x 15 x 8 us."""
    f = finding(service(style), style)
    assert f.evidence["count"] == REQUESTS * ITEMS
    assert f.saving_ns == REQUESTS * (ITEMS - 1) * (COPY_US + BODY_US) * US
    assert f"in {REQUESTS} of the {REQUESTS}" in f.saving_how
    assert f"{REQUESTS * (ITEMS - 1) * 2} calls lose their CPU time" in f.saving_how


def test_where_the_copies_sync_waits_each_request_keeps_its_first_copy():
    """A copy that returns once queued, whose sync waits (the finding holds the copies, not
    the syncs): each request's first copy is the one that blocked, through its sync, and it
    stays with its wait for the previous request's forward. Removing it would claim that wait
    (~250 us a request) too."""
    f = finding(service("kineto", host_mem="pinned"), "kineto")
    assert f"replayed with {REQUESTS} of these {REQUESTS * ITEMS} calls kept" in f.saving_how
    assert f.saving_ns == REQUESTS * (ITEMS - 1) * (COPY_US + BODY_US) * US


def test_the_loops_ops_keep_their_gpu_work():
    """With 100 us kernels for each item's cast and offset, the step is the GPU's: batching
    takes their launches off the CPU, not their GPU work. The replayed window after the fix
    is at least the GPU work that stays (the raw rows': every kernel, the first copy of each
    request), so the saving is at most the recorded window less that."""
    b = service("kineto", gpu_us=100)
    t = b.tables()
    calls, gpu = t["call"], t["gpu"]
    window = (max((calls["ts_ns"] + calls["dur_ns"]).max(), (gpu["ts_ns"] + gpu["dur_ns"]).max())
              - min(calls["ts_ns"].min(), gpu["ts_ns"].min()))
    kept = (gpu.filter(pl.col("kind") == "kernel")["dur_ns"].sum()
            + REQUESTS * gpu.filter(pl.col("kind") == "copy")["dur_ns"].max())
    f = finding(b, "kineto")
    assert "done once on the batch" in f.saving_how
    assert 0 < f.saving_ns <= window - kept


@pytest.mark.parametrize("per_item", ["embed", "item"])
def test_a_loop_that_calls_a_model_or_reads_a_value_keeps_its_ops(per_item):
    """A loop that runs another user function on each item (its forward is not batched by
    batching the upload), or reads a value back per item (the items depend on what the GPU
    computed), keeps its ops: only the copies and their syncs go, 3 x 15 x 8 us (and the
    0.5 us after each embed's span, before the next copy)."""
    f = finding(service("kineto", per_item), "kineto")
    lead = 0.5 if per_item == "embed" else 0
    assert f.saving_ns == REQUESTS * (ITEMS - 1) * (COPY_US + lead) * US
    assert "done once on the batch" not in f.saving_how


def _body_by_loop(idx, group, mine, by_row, thread, stack, waits):
    """The per-instance loop ``loop_body`` vectorises (second method)."""
    gone, loops = [], 0
    for g in np.unique(group):
        at = idx[group == g]
        lo, hi = at.min(), at.max()
        sites = {stack[r] for r in range(lo, hi + 1) if thread[r] == thread[lo] and by_row[r] == g}
        hi = max([hi] + [r for r in range(lo, len(by_row)) if by_row[r] == g
                         and thread[r] == thread[lo] and stack[r] in sites])
        rows = [r for r in range(lo, hi + 1) if thread[r] == thread[lo]]
        mine_stacks = set(stack[mine].tolist())
        if any(by_row[r] != g or (waits[r] and r not in mine and stack[r] not in mine_stacks)
               for r in rows):
            continue
        body = [r for r in rows if r not in mine]
        seen = set()
        for r in body:
            if stack[r] in seen:
                gone.append(r)
            seen.add(stack[r])
        loops += bool(body)
    return np.sort(np.array(gone, np.int64)), loops


def test_loop_body_equals_the_per_instance_loop():
    from zym.rules import savings

    rng = np.random.default_rng(11)
    for trial in range(200):
        n = int(rng.integers(5, 300))
        thread = rng.integers(0, 1 + trial % 3, n)
        by_row = np.repeat(rng.integers(0, 6, n // 5 + 1), 5)[:n]
        stack = rng.integers(0, 8, n)
        waits = rng.random(n) < [0.0, 0.05, 0.3][trial % 3]
        op = np.where(rng.random(n) < 0.5, rng.integers(0, 40, n), -1)
        idx = np.sort(rng.choice(n, int(rng.integers(1, n // 3 + 2)), replace=False))
        group = by_row[idx]
        calls = pl.DataFrame({"_thread": thread, "stack_id": stack,
                              "op_id": pl.Series(op).set(pl.Series(op) < 0, None)})
        a = SimpleNamespace(facts=SimpleNamespace(calls=calls),
                            timeline=SimpleNamespace(waits=waits))
        syncs = savings.own_syncs(idx, idx, a)
        mine = np.union1d(idx, syncs)
        got = savings.loop_body(idx, group, syncs, by_row, a)
        want = _body_by_loop(idx, group, mine, by_row, thread, stack, waits)
        assert got[0].tolist() == want[0].tolist() and got[1] == want[1], trial
