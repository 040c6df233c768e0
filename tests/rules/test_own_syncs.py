"""A batched copy takes its torch op's stream sync with it (``rules.savings.own_syncs``):
torch's ``copy_`` without ``non_blocking`` queues ``cudaMemcpyAsync`` and then waits in
``cudaStreamSynchronize``; a fix that removes the copy but kept that wait still made the CPU
wait for the GPU once per copy."""
from __future__ import annotations

import numpy as np
import polars as pl
from zym.rules.savings import fix_for
from zym.rules.testing import CaptureBuilder

MAIN = [("python", "main", "app.py", 1)]
HANDLE = MAIN + [("python", "handle", "app.py", 10)]


def test_the_copies_removed_by_a_batch_take_their_own_syncs_not_the_kept_ones():
    b = CaptureBuilder()
    for _ in range(3):  # three calls of handle, each uploading 4 times in its loop
        with b.enclosing(HANDLE):
            for _ in range(4):
                b.copy(HANDLE, "HtoD", 64)
                b.kernel(HANDLE, "k", gpu_us=50)
    a = b.analysis()
    calls = a.facts.calls
    api = calls["api"].cast(pl.String)
    copies = calls.filter(api == "cudaMemcpyAsync")
    syncs = calls.filter(api == "cudaStreamSynchronize")
    # by hand: each copy is followed by its sync (same op); the first copy of each handle
    # call is kept with its sync, the other 3 x 3 go, each with its sync
    copy_idx, sync_idx = copies["call_idx"].to_numpy(), syncs["call_idx"].to_numpy()
    assert (copies["op_id"].to_numpy() == syncs["op_id"].to_numpy()).all()
    gone_copies = np.delete(copy_idx, [0, 4, 8])
    gone_syncs = np.delete(sync_idx, [0, 4, 8])
    fix = fix_for({"model": "batch"}, "calls", copies.select("call_idx"), a, {})
    assert fix.remove_calls.tolist() == sorted(gone_copies.tolist() + gone_syncs.tolist())
    assert set(gone_syncs) <= set(fix.gap_calls.tolist())
    assert "the 9 waits their torch ops made after them" in fix.describe
    # and the replay: without those syncs the loop no longer waits for each upload's kernel
    assert a.timeline.saving(fix) > 0
