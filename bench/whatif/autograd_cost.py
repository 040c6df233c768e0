"""What autograd's recording costs a torch op on the CPU, where a service leaves it on for
inference: a loop of small ops (a linear layer with trained weights, GELU, layer norm, a
residual add: what a launch-bound decoding step is made of), timed with autograd on, under
``torch.no_grad()`` and under ``torch.inference_mode()``, interleaved; and how many of the
loop's torch ops a torch.profiler trace marks as recorded by autograd (``Sequence number``).

    python bench/whatif/autograd_cost.py OUT.json [--rounds 9]

The loop's weights require grad (parameters) and its input does not, as in a service.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn

WIDTH, BLOCKS, ITERS = 256, 8, 200


def loop(model: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    for norm, lin in model:
        x = x + nn.functional.gelu(lin(norm(x)))
    return x


def timed(model, x, mode: str) -> float:
    ctx = {"grad": torch.enable_grad, "no_grad": torch.no_grad,
           "inference": torch.inference_mode}[mode]
    torch.cuda.synchronize()
    t = time.perf_counter()
    with ctx():
        for _ in range(ITERS):
            loop(model, x)
    torch.cuda.synchronize()
    return time.perf_counter() - t


def traced_ops(model, x, mode: str) -> dict:
    from torch.profiler import ProfilerActivity, profile

    ctx = {"grad": torch.enable_grad, "no_grad": torch.no_grad,
           "inference": torch.inference_mode}[mode]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof, ctx():
        loop(model, x)
        torch.cuda.synchronize()
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    seq = [e for e in ops if "Sequence number" in e.get("args", {})]
    return {"cpu_ops": len(ops), "with_sequence_number": len(seq),
            "names_with": sorted({e["name"] for e in seq})[:20],
            "names_without": sorted({e["name"] for e in ops if e not in seq})[:20]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--rounds", type=int, default=9)
    a = p.parse_args()
    torch.manual_seed(0)
    model = nn.ModuleList(nn.ModuleList([nn.LayerNorm(WIDTH), nn.Linear(WIDTH, WIDTH)])
                          for _ in range(BLOCKS)).cuda().half()
    x = torch.randn(8, WIDTH, device="cuda", dtype=torch.half)
    modes = ["grad", "no_grad", "inference"]
    for m in modes:
        timed(model, x, m)
    times = {m: [] for m in modes}
    for r in range(a.rounds):
        for m in (modes if r % 2 == 0 else modes[::-1]):
            times[m].append(timed(model, x, m))
    trace = {m: traced_ops(model, x, m) for m in modes}
    ops_per_loop = trace["grad"]["cpu_ops"]
    med = {m: statistics.median(v) for m, v in times.items()}
    out = {"iters": ITERS, "blocks": BLOCKS, "times_s": times, "median_s": med,
           "traced_ops_per_loop": trace,
           "ns_per_traced_op": {m: med[m] / ITERS / ops_per_loop * 1e9 for m in modes},
           "grad_minus_inference_ns_per_op": (med["grad"] - med["inference"]) / ITERS
           / ops_per_loop * 1e9,
           "grad_minus_no_grad_ns_per_op": (med["grad"] - med["no_grad"]) / ITERS
           / ops_per_loop * 1e9,
           "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: out[k] for k in ("ns_per_traced_op", "grad_minus_inference_ns_per_op",
                                          "grad_minus_no_grad_ns_per_op")}))
    print({m: (t["cpu_ops"], t["with_sequence_number"]) for m, t in trace.items()})


if __name__ == "__main__":
    main()
