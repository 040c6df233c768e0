"""Why did drift's pinned-snapshot fix save a third of its estimate? drift's service (base),
its snapshot (a 4 MB ``.cpu()`` of a weight) timed where it runs, with the page faults it took
(``ru_minflt``): passes untraced, then under torch.profiler (CPU + CUDA), then untraced again.
Prints, per phase, the median ms and page faults per snapshot, as JSON (bench/whatif/
device_drift_pinned.sh's card; docs/benchmarks.md, thirty-eighth round)."""
from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent / "workloads"))
import drift

TIMES: list[tuple[float, int]] = []
_snapshot = drift.snapshot


def timed_snapshot(model, pinned=None):
    torch.cuda.synchronize()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = time.perf_counter()
    out = _snapshot(model, pinned)
    TIMES.append(((time.perf_counter() - t) * 1e3,
                  resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults))
    return out


def phase(svc, passes: int) -> dict:
    TIMES.clear()
    with torch.inference_mode():
        for _ in range(passes):
            for request in svc.requests:
                svc.handle(request)
    torch.cuda.synchronize()
    return {"snapshots": len(TIMES), "ms": round(statistics.median(t for t, _ in TIMES), 3),
            "faults": statistics.median(f for _, f in TIMES)}


def main() -> int:
    drift.snapshot = timed_snapshot
    svc = drift.build("base", "cuda")
    phase(svc, 1)  # warm-up
    got = {"untraced": phase(svc, 3)}
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                 record_shapes=True):
        got["traced"] = phase(svc, 3)
    got["untraced again"] = phase(svc, 3)
    print(json.dumps(got))
    return 0


if __name__ == "__main__":
    sys.exit(main())
