"""Does torch.profiler slow a pageable device-to-host copy? One process: N copies of a 4 MB
tensor to new pageable host memory (``.cpu()``), each timed on the host (synchronized before
and after), untraced, then the same inside ``torch.profiler.profile`` (CPU + CUDA activities),
then untraced again; and the same with a pinned destination. Prints the median per copy of
each, in ms, as JSON (on the device: bench/whatif/device_pageable.sh)."""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile


def timed(src: torch.Tensor, n: int, pinned: torch.Tensor | None) -> list[float]:
    out = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        if pinned is None:
            src.cpu()
        else:
            pinned.copy_(src, non_blocking=True)
            torch.cuda.current_stream().synchronize()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    src = torch.randn(1024, 1024, device="cuda")  # 4 MB of fp32, as drift's snapshot
    pinned = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
    timed(src, 3, None)
    timed(src, 3, pinned)
    got = {}
    for name, dest in (("pageable", None), ("pinned", pinned)):
        got[f"{name} untraced"] = statistics.median(timed(src, n, dest))
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            got[f"{name} traced"] = statistics.median(timed(src, n, dest))
        got[f"{name} untraced again"] = statistics.median(timed(src, n, dest))
    print(json.dumps({k: round(v, 4) for k, v in got.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
