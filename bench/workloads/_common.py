"""Shared by the H200 workloads: argument parsing and the result file bench/capture_overhead.py
reads (``per_step_ms``: the in-process time of each measured step, warm-up excluded)."""
from __future__ import annotations

import argparse
import json
import time


def parse(description: str, steps: int, warmup: int) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", required=True, help="JSON result file")
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--warmup", type=int, default=warmup)
    return ap.parse_args()


def timed(step, a: argparse.Namespace, sync) -> list[float]:
    """Run ``step`` warmup + steps times; each measured step ends with ``sync()``."""
    for _ in range(a.warmup):
        step()
    sync()
    out = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        sync()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def write(a: argparse.Namespace, per_step_ms: list[float], **facts) -> None:
    with open(a.out, "w") as f:
        json.dump({"per_step_ms": per_step_ms, **facts}, f)
