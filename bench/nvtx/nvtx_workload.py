"""A process with NVTX ranges, for bench/nvtx/device_nvtx.sh: a small transformer encoder served
step by step on the GPU.

    python3 nvtx_workload.py ranges|emit|plain [--steps N] [--seconds S] [--ready FILE] [--out JSON]

* ``ranges``: ``torch.cuda.nvtx.range`` around each step ("step") and its phases ("forward",
  "sample"), the way services annotate their work; a second thread runs "background" ranges
  with a matmul each, so ranges live on two threads;
* ``emit``: the same steps under ``torch.autograd.profiler.emit_nvtx()``: one range per aten op
  ("aten::linear, seq = N, op_id = M", ...), nested as the operators nest;
* ``plain``: no NVTX at all (the floor).

Prints, and writes to ``--out``, the median and spread of the step time after warm-up.
``--seconds`` keeps stepping until that many seconds have passed (an attach target);
``--ready`` is touched once warm-up is done.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import threading
import time
from pathlib import Path

import torch
from torch import nn

WARMUP = 5


def build(device: str = "cuda") -> tuple[nn.Module, torch.Tensor]:
    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048,
                                       batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
    return model.to(device).eval(), torch.randn(16, 128, 512, device=device)


def step(model: nn.Module, x: torch.Tensor, annotate: bool) -> int:
    rng = torch.cuda.nvtx.range if annotate else (lambda _name: contextlib.nullcontext())
    with rng("step"):
        with rng("forward"):
            y = model(x)
        with rng("sample"):
            return int(y[:, -1].mean(-1).argmax().item())   # a host sync, as a sampler has


def background(stop: threading.Event, annotate: bool) -> None:
    a = torch.randn(256, 256, device="cuda")
    rng = torch.cuda.nvtx.range if annotate else (lambda _name: contextlib.nullcontext())
    while not stop.is_set():
        with rng("background"):
            (a @ a).sum().item()
        time.sleep(0.005)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["ranges", "emit", "plain"])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--ready", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-background", action="store_true",
                    help="one thread only (no background matmul thread)")
    a = ap.parse_args()
    model, x = build()
    stop = threading.Event()
    bg = threading.Thread(target=background, args=(stop, a.mode == "ranges"), daemon=True)
    if not a.no_background:
        bg.start()
    outer = torch.autograd.profiler.emit_nvtx() if a.mode == "emit" else contextlib.nullcontext()
    times = []
    t_end = None
    with torch.no_grad(), outer:
        i = 0
        while True:
            t0 = time.perf_counter()
            step(model, x, a.mode == "ranges")
            if i >= WARMUP:
                times.append(time.perf_counter() - t0)
            i += 1
            if i == WARMUP:
                if a.ready:
                    a.ready.touch()
                t_end = time.monotonic() + a.seconds if a.seconds else None
            if t_end is not None:
                if time.monotonic() >= t_end:
                    break
            elif i >= a.steps + WARMUP:
                break
    stop.set()
    if not a.no_background:
        bg.join()
    ms = sorted(t * 1e3 for t in times)
    doc = {"mode": a.mode, "steps": len(ms), "median_ms": statistics.median(ms),
           "p10_ms": ms[len(ms) // 10], "p90_ms": ms[(9 * len(ms)) // 10],
           "background": not a.no_background, "steps_ms": [round(t * 1e3, 4) for t in times]}
    print(json.dumps({k: v for k, v in doc.items() if k != "steps_ms"}), flush=True)
    if a.out:
        a.out.write_text(json.dumps(doc))


if __name__ == "__main__":
    main()
