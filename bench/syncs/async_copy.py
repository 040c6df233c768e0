"""A workload for `syncs.sync-after-async-dtoh` and `syncs.dtoh-copy-sync` on a real GPU: each
step queues matmuls, copies a result to the host without waiting in one function
(``fetch``: ``.to("cpu", non_blocking=True)``) and waits for it in its caller with
``torch.cuda.synchronize()``; then reads a second result with a blocking ``.cpu()``.
Recorded with torch.profiler (Python stacks on).

    python bench/syncs/async_copy.py OUT.json.gz [--steps 30]
"""
from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile


def fetch(t: torch.Tensor) -> torch.Tensor:
    return t.to("cpu", non_blocking=True)          # queued, not waited for


def step(a: torch.Tensor, b: torch.Tensor) -> float:
    c = a @ b
    for _ in range(4):
        c = torch.tanh(c @ b)
    host = fetch(c[:64])
    torch.cuda.synchronize()                      # waits for every kernel above, then the copy
    total = float(host.sum())
    d = (c @ b).cpu()                             # a blocking copy: .cpu() copies, then syncs
    return total + float(d[0, 0])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda") / 64
    for _ in range(3):
        step(a, b)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True) as prof:
        for _ in range(args.steps):
            step(a, b)
    prof.export_chrome_trace(args.out)


if __name__ == "__main__":
    main()
