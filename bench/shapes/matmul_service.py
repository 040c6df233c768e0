"""H200 workload for `zym capture --shapes` (issue 16): a scoring service whose step runs its
matmuls in four ways, one source line each (the lines the findings must name):

* ``proj``: bfloat16 Linear, 4096 -> 4096 (the fast path every other is compared with);
* ``head``: a float32 Linear with TF32 off (CUDA-core SGEMM: compute.fp32-matmul-no-tf32);
* ``rescore``: a float64 matmul, a "numerically careful" rescoring (FP64 GEMM, ~10x slower per
  FLOP than bf16 on the H200 yet not float32: compute.slow-matmul-path, which needs shapes);
* ``odd``: a bfloat16 matmul with an inner dimension of 4095 (compute.fp16-unaligned-matmul,
  which needs shapes).

    python3 matmul_service.py --out RESULT.json [--steps N] [--trace TRACE.json]

``--trace``: record the measured steps with torch.profiler (record_shapes, with_stack) instead of
timing them bare, and write its Kineto trace there (the peer's view of the same workload).
"""
from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

D, TOKENS = 4096, 1024


class Scorer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(D, D, dtype=torch.bfloat16)
        self.head = nn.Linear(D, D, dtype=torch.float32)
        self.rescore_w = nn.Parameter(torch.randn(D, 1024, dtype=torch.float64) / D ** 0.5)
        self.odd_w = nn.Parameter(torch.randn(D - 1, 2048, dtype=torch.bfloat16) / D ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        logits = self.head(h.float())
        score = logits.double() @ self.rescore_w
        extra = h[:, : D - 1] @ self.odd_w
        return score.sum() + extra.float().sum()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--trace", default=None)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Scorer().cuda()
    x = torch.randn(TOKENS, D, device="cuda", dtype=torch.bfloat16)

    @torch.inference_mode()
    def step() -> torch.Tensor:
        return model(x)

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    times = []
    prof = None
    if a.trace:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                       record_shapes=True, with_stack=True)
        prof.__enter__()
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    if prof is not None:
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(a.trace)
    times.sort()
    with open(a.out, "w") as f:
        json.dump({"per_step_ms": times, "median_ms": times[len(times) // 2],
                   "torch": torch.__version__}, f)


if __name__ == "__main__":
    main()
