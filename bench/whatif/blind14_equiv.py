"""The fourteenth blind round: every variant of clipaction and skufcast against base on the
same request (the client sees the same results), before they are measured (needs torch).

    python3 bench/whatif/blind14_equiv.py [--device cpu] [--only clipaction]

How each variant runs, and the CPU's smaller sizes: bench/whatif/equivalence.py.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from equivalence import main


def cmp_clipaction(a, b):
    """The video's five best actions and their probabilities, per clip its best action and
    probability (the timeline), and the 512-float embedding. shared_backbone computes the
    features once and feeds the head and the embedding from that one pass, where base runs the
    same backbone on the same views twice (the full net, then its features): the same kernels
    on the same tensors (on the GPU the same cuDNN algorithms, chosen by the same heuristics,
    whose forward convolutions are deterministic), so identical results (max |d| 0), on the
    CPU and on the GPU. keep_cache drops the torch.cuda.empty_cache() after each request: only
    where memory comes from changes (on the CPU nothing at all); identical. cudnn_benchmark
    turns on cuDNN's benchmark mode: on the GPU each Conv3d shape may get another algorithm
    (implicit GEMM, Winograd, FFT...), and they run in TF32 (torch.backends.cudnn.allow_tf32, on
    by default, 10-bit mantissas), so the features and logits move by up to ~1e-3 relative and
    the probabilities and embedding by ~1e-4 to 1e-3 absolute; an action's rank changes only
    where two probabilities are that close (counted). On the CPU the flag does nothing
    (identical). all: as cudnn_benchmark."""
    top = sum(x[0] != y[0] for x, y in zip(a["top5"], b["top5"]))
    dp = max(abs(x[1] - y[1]) for x, y in zip(a["top5"], b["top5"]))
    clips = sum(x["action"] != y["action"] for x, y in zip(a["timeline"], b["timeline"]))
    dc = max(abs(x["prob"] - y["prob"]) for x, y in zip(a["timeline"], b["timeline"]))
    de = max(abs(x - y) for x, y in zip(a["embedding"], b["embedding"]))
    return (f"top-5 {5 - top}/5 same (prob max |d| {dp:.1e}); {len(a['timeline'])} clips, "
            f"{clips} actions differ (prob max |d| {dc:.1e}); embedding max |d| {de:.1e}")


def cmp_skufcast(a, b):
    """Per SKU its 10/50/90% quantile curves (units a day, 28 days) and its order, per
    category its daily median demand. fused_attention computes the same masked attention with
    F.scaled_dot_product_attention and the same additive mask (finfo.min on the days before a
    SKU was listed: exactly zero weight, as in base's softmax): on CUDA in float32 the
    memory-efficient kernel (flash takes no float32 and no arbitrary mask), on the CPU its
    flash or math kernel, another summation order than base's two batched matmuls (float32:
    TF32 matmuls are off, harness's default, so no 10-bit rounding in either), so the layers'
    outputs move by ~1e-6 relative and the quantiles by up to ~1e-5 relative; an order (a
    ceil) changes by one unit only where the need lies that close to a whole number (counted).
    cached_calendar uses the calendar and positions built once for the run date: the same
    numpy loop and the same device ops on the same inputs, identical (max |d| 0). gpu_sort
    sorts the three quantiles with torch.sort on the device instead of numpy's on the host:
    sorting moves float32 values without changing them, the rest runs on the same values,
    identical (max |d| 0), on the CPU and on the GPU. all: as fused_attention."""
    rel = max(abs(p - q) / max(abs(p), 1.0) for x, y in zip(a["skus"], b["skus"])
              for k in ("p10", "p50", "p90") for p, q in zip(x[k], y[k]))
    orders = sum(x["order"] != y["order"] for x, y in zip(a["skus"], b["skus"]))
    cat = max(abs(p - q) / max(abs(p), 1.0) for k in a["categories"]
              for p, q in zip(a["categories"][k], b["categories"][k]))
    same = all(x["sku"] == y["sku"] for x, y in zip(a["skus"], b["skus"]))
    return (f"{len(a['skus'])} SKUs{'' if same else ' (SKUs DIFFER)'}: quantiles max rel |d| "
            f"{rel:.1e}, {orders} orders differ; category totals max rel |d| {cat:.1e}")


if __name__ == "__main__":
    sys.exit(main({"clipaction": cmp_clipaction, "skufcast": cmp_skufcast},
                  __doc__.split("\n\n")[0]))
