"""What a fused attention kernel costs against the batched matmuls of attention written out by
hand, by dtype and shape: ``softmax(q @ k^T * scale) @ v`` as PyTorch runs it (two ``bmm``
kernels, a scale, a softmax) against ``F.scaled_dot_product_attention`` on the same inputs.
Each timed with CUDA events, the median of ``--reps`` runs after a warm-up, for float32 (TF32
off and on), bfloat16 and float16, over a grid of heads x queries x keys x head size:

    python bench/whatif/attention_cost.py OUT.json [--reps 20] [--shapes 20x340x32,...]

What ``compute.unfused-attention``'s estimate needs: it takes the softmax, scaling and copy
kernels away and keeps the matmuls' time as the fused kernel's; ``sdpa_over_bmm`` (the fused
kernel's time over the two matmuls') says how far that holds for each dtype.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

DTYPES = {"float32": (torch.float32, False), "float32_tf32": (torch.float32, True),
          "bfloat16": (torch.bfloat16, False), "float16": (torch.float16, False)}
# (batch x heads, queries = keys, head size): short and long sequences, small and large heads
SHAPES = [(64, 128, 64), (64, 512, 64), (64, 1024, 64), (32, 2048, 64), (16, 4096, 64),
          (64, 512, 32), (64, 512, 128), (32, 1024, 128), (256, 256, 64), (8, 512, 64)]


def timed(fn, reps: int) -> float:
    """Median milliseconds of ``fn`` on the GPU, by CUDA events, after two warm-up runs."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def one(bh: int, n: int, d: int, dtype: torch.dtype, reps: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(bh, n, d, device="cuda", dtype=dtype, generator=g) for _ in range(3))
    scale = d ** -0.5
    kt = k.transpose(-2, -1)
    scores = torch.bmm(q, kt)
    probs = torch.softmax(scores * scale, dim=-1)

    def unfused():
        s = torch.bmm(q, kt) * scale
        return torch.bmm(torch.softmax(s, dim=-1), v)

    def bmms():
        torch.bmm(q, kt, out=scores)
        return torch.bmm(probs, v)

    q4, k4, v4 = (t.view(1, bh, n, d) for t in (q, k, v))

    def sdpa():
        return F.scaled_dot_product_attention(q4, k4, v4, scale=scale)

    err = (unfused().float() - sdpa().view(bh, n, d).float()).abs().max().item()
    row = {"bh": bh, "n": n, "d": d, "flops": 4 * bh * n * n * d,
           "unfused_ms": timed(unfused, reps), "bmm_pair_ms": timed(bmms, reps),
           "sdpa_ms": timed(sdpa, reps), "max_abs_diff": err}
    row["sdpa_over_bmm"] = row["sdpa_ms"] / row["bmm_pair_ms"]
    row["saving_ms"] = row["unfused_ms"] - row["sdpa_ms"]
    row["predicted_ms"] = row["unfused_ms"] - row["bmm_pair_ms"]  # the estimate as it was
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--shapes", default="",
                   help="more shapes, as BHxNxD[,BHxNxD...] (batch x heads, queries = keys, "
                        "head size): a service's own")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="of " + ", ".join(DTYPES))
    args = p.parse_args()
    shapes = SHAPES + [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",") if s]
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": []}
    names = [d for d in args.dtypes.split(",") if d]
    for name in names:
        dtype, tf32 = DTYPES[name]
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for bh, n, d in shapes:
            row = {"dtype": name, **one(bh, n, d, dtype, args.reps)}
            result["rows"].append(row)
            print(f"{name:13s} bh={bh:4d} n={n:5d} d={d:4d} unfused {row['unfused_ms']:8.3f} "
                  f"bmm pair {row['bmm_pair_ms']:8.3f} sdpa {row['sdpa_ms']:8.3f} ms -> "
                  f"sdpa/bmm {row['sdpa_over_bmm']:5.2f} saved {row['saving_ms']:7.3f} "
                  f"(estimate as it was {row['predicted_ms']:7.3f})", flush=True)
        torch.cuda.empty_cache()
    torch.backends.cuda.matmul.allow_tf32 = False
    for name in names:
        r = [x["sdpa_over_bmm"] for x in result["rows"] if x["dtype"] == name]
        print(f"{name:13s} sdpa/bmm median {statistics.median(r):.2f} "
              f"({min(r):.2f}-{max(r):.2f})")
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
