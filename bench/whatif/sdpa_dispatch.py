"""What attention costs the host: the CPU time of one call of hand-written attention
(``softmax(q @ k^T * scale) @ v`` on q, k, v permuted out of one projection, as models write
it) against ``F.scaled_dot_product_attention`` on the same views, and of the single ops they
are made of, each in float32 and bfloat16, under inference mode. Tensors are tiny, so a loop
of calls measures their dispatch and launch. Beside each, the GPU's time of one more loop
(CUDA events around it): about the host's where the GPU kept up and waited for the host's
launches (``gpu_below_host`` only says which of the two was the shorter in that run; on the
H100 of the eleventh blind round all forms but one were within 10% of each other, float32's
hand-written attention once 131 us on the GPU against 89 us on the host, bfloat16's 84 against
90):

    python bench/whatif/sdpa_dispatch.py OUT.json [--calls 2000] [--repeats 7]

What ``compute.unfused-attention``'s estimate needs on the host side (its GPU side:
``attention_cost.py``): the fused call is one op, but not one as cheap as a softmax; ``per
unit`` gives each form in units of ``aten::empty``'s time (the op zym reads a trace's host
speed by, ``KINETO_SPEED_OP``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

B, T, HEADS, DH = 2, 16, 4, 16   # tiny: the host's time alone


def forms(dtype: torch.dtype) -> dict:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, T, 3 * HEADS * DH, device="cuda", dtype=dtype, generator=g)
    q, k, v = x.view(B, T, 3, HEADS, DH).permute(2, 0, 3, 1, 4)   # (b, h, t, d) views
    qc, kc = q.contiguous(), k.contiguous()
    scale = DH ** -0.5

    def unfused():
        w = torch.matmul(q * scale, k.transpose(-1, -2))
        a = torch.matmul(w.softmax(-1), v)
        return a.transpose(1, 2).reshape(B, T, HEADS * DH)

    def sdpa():
        a = F.scaled_dot_product_attention(q, k, v)
        return a.transpose(1, 2).reshape(B, T, HEADS * DH)

    def sdpa_alone():
        return F.scaled_dot_product_attention(q, k, v)

    w = torch.matmul(qc, kc.transpose(-1, -2))
    return {
        "unfused": unfused, "sdpa": sdpa, "sdpa_alone": sdpa_alone,
        "empty": lambda: torch.empty((B, HEADS, T, DH), device="cuda", dtype=dtype),
        "mul": lambda: q * scale,
        "softmax": lambda: w.softmax(-1),
        "matmul_contiguous": lambda: torch.matmul(qc, kc.transpose(-1, -2)),
        "matmul_permuted": lambda: torch.matmul(q, k.transpose(-1, -2)),
        "output_reshape": lambda: q.transpose(1, 2).reshape(B, T, HEADS * DH),
    }


def host_us(fn, calls: int, repeats: int) -> tuple[float, list[float], float]:
    """Median host microseconds a call over ``repeats`` loops of ``calls`` calls, each
    loop's, and the GPU's microseconds a call (CUDA events around one loop)."""
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    b.synchronize()
    return statistics.median(runs), runs, a.elapsed_time(b) * 1e3 / calls


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "shape": {"b": B, "t": T, "heads": HEADS, "head_dim": DH}, "rows": []}
    with torch.inference_mode():
        for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
            rows = {}
            for form, fn in forms(dtype).items():
                med, runs, gpu = host_us(fn, args.calls, args.repeats)
                rows[form] = med
                result["rows"].append({"dtype": name, "form": form, "host_us": med,
                                       "runs_us": runs, "gpu_us": gpu,
                                       "gpu_below_host": gpu < med})
                print(f"{name:9s} {form:18s} host {med:7.2f} us a call "
                      f"[{min(runs):.2f}, {max(runs):.2f}]  GPU {gpu:7.2f} us", flush=True)
            unit = rows["empty"]
            for r in result["rows"]:
                if r["dtype"] == name:
                    r["per_unit"] = r["host_us"] / unit
            print(f"{name:9s} unfused - sdpa {rows['unfused'] - rows['sdpa']:.2f} us; "
                  f"sdpa alone {rows['sdpa_alone'] / unit:.2f} units of aten::empty "
                  f"({unit:.2f} us); softmax {rows['softmax'] / unit:.2f}, mul "
                  f"{rows['mul'] / unit:.2f}, matmul (permuted) "
                  f"{rows['matmul_permuted'] / unit:.2f}", flush=True)
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
