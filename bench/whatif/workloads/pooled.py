"""A service that fans each request out to a thread pool: 4 worker threads each encode a
quarter of the candidates (a small MLP encoder in float16) and read their scores back one by
one with ``.item()``; the request's thread only waits. GPU work is launched from the workers,
so the thread that launches most of it is not the one that runs ``handle``. Not a planted
case: it checks attribution, steps and savings across threads; the variants measure two fixes.
"""
from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import nn

WORKERS, CANDIDATES, FEATURES, HIDDEN = 4, 32, 1024, 4096
VARIANTS = {"base": "as written",
            "tolist": "syncs.scalar-readback: scores.tolist() once per worker instead of "
                      "scores[i].item() per candidate",
            "numpy_rows": "the rows built with torch.from_numpy of one float32 array (no "
                          "per-float Python conversion)"}


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, HIDDEN),
                                 nn.GELU(), nn.Linear(HIDDEN, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


def make_requests(n: int = 8, seed: int = 0) -> list[list[list[float]]]:
    rng = random.Random(seed)
    return [[[rng.random() for _ in range(FEATURES)] for _ in range(CANDIDATES)]
            for _ in range(n)]


class Service:
    def __init__(self, variant: str, device: str) -> None:
        torch.manual_seed(0)
        self.device = device
        self.dtype = torch.float16 if device == "cuda" else torch.float32
        self.model = Encoder().to(device, self.dtype).eval()
        self.requests = make_requests()
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="worker")
        self.variant = variant

    def work(self, rows: list[list[float]]) -> list[float]:
        with torch.inference_mode():
            if self.variant == "numpy_rows":
                x = torch.from_numpy(np.asarray(rows, np.float32)).to(self.device, self.dtype)
            else:
                x = torch.tensor(rows, dtype=self.dtype, device=self.device)
            scores = self.model(x)
            if self.variant == "tolist":
                return scores.tolist()
            return [scores[i].item() for i in range(len(rows))]

    def handle(self, request: list[list[float]]) -> list[float]:
        share = len(request) // WORKERS
        parts = [request[i * share:(i + 1) * share] for i in range(WORKERS)]
        return [s for part in self.pool.map(self.work, parts) for s in part]


def build(variant: str, device: str = "cuda") -> Service:
    if variant not in VARIANTS:
        raise SystemExit(f"pooled: unknown variant {variant}; one of {', '.join(VARIANTS)}")
    return Service(variant, device)
