"""The ninth blind round: every variant of nowcast, protvar and changedet against base on the
same request (the client sees the same results), before they are measured (needs torch).

    python3 bench/whatif/blind9_equiv.py [--device cpu] [--only nowcast]

How each variant runs, and the CPU's smaller sizes: bench/whatif/equivalence.py.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from equivalence import main


def cmp_nowcast(a, b):
    """Per lead time the ensemble-mean dBZ (uint8, half-dB steps) and the exceedance
    probabilities (uint8 percent, in steps of 100/6 for 6 members). gpu_decode runs the same
    float64 arithmetic on the GPU (pow and log10 may differ from numpy's in the last bit of a
    float64, nothing after the float32 cast) and gpu_products the same float64 reductions, so
    both should be identical or nearly: a mean within an ulp of a half-dB boundary could move
    one level. shared_spinup runs the spin-up's convolutions at batch 1, not 6 (cuDNN may pick
    another algorithm, TF32 by its default: ~1e-4 relative on the states), and the forecast
    feeds its own output back for 12 steps, so that noise is carried along: the same answer is
    the dBZ within a level or two on a small fraction of the pixels, and a probability moved
    by one member (17 points) where a member's rain rate is within noise of a threshold, on a
    small fraction of the pixels."""
    da = np.abs(a["dbz"].astype(np.int16) - b["dbz"].astype(np.int16))
    dp = np.abs(a["prob"].astype(np.int16) - b["prob"].astype(np.int16))
    if a["dbz"].shape != b["dbz"].shape or a["prob"].shape != b["prob"].shape:
        return f"shapes {a['dbz'].shape} vs {b['dbz'].shape}: DIFFER"
    last = f"last lead {np.mean(da[-1] > 0):.1e}"
    return (f"dBZ {a['dbz'].shape}: max |d| {int(da.max())} levels, {np.mean(da > 0):.1e} "
            f"of pixels differ ({last}), {np.mean(da > 1):.1e} by more than one; probabilities: "
            f"max |d| {int(dp.max())} points, {np.mean(dp > 0):.1e} of values differ; "
            f"{np.mean(a['prob'][0] > 0):.2f} of the map with some chance of 1 mm/h")


def cmp_protvar(a, b):
    """Per variant three scores, in the same variant order. batched_variants and
    fused_attention are float32 all the way (another batch size or attention kernel sums in
    another order: ~1e-6 relative on the log-probabilities, so the log-likelihood ratios
    within ~1e-4 and the whole-sequence deltas, sums over ~340 positions, within ~1e-3). tf32
    rounds the matmuls' inputs to 10 mantissa bits: ~1e-3 relative on the logits, so ~1e-3 on
    the site ratios and up to ~1e-2 on the whole-sequence deltas, still noise against the
    spread of the scores across variants (reported). The same answer: the variants ranked the
    same by each score unless two are within that noise (adjacent swaps counted)."""
    if [x["variant"] for x in a] != [y["variant"] for y in b]:
        return "variants DIFFER"
    parts = []
    for key in ("llr", "pll_delta", "embedding_shift"):
        xa, xb = np.array([x[key] for x in a]), np.array([y[key] for y in b])
        same = int(np.sum(np.argsort(-xa, kind="stable") == np.argsort(-xb, kind="stable")))
        parts.append(f"{key}: max |d| {np.max(np.abs(xa - xb)):.1e} (spread {np.std(xa):.1e}), "
                     f"same rank {same}/{len(xa)}")
    return f"{len(a)} variants: " + "; ".join(parts)


def cmp_changedet(a, b):
    """The uint8 change probability map and the changed areas. gpu_stretch runs the same float64
    arithmetic and linear-interpolated percentiles on the GPU, reference_cache the same
    computation on the same numbers (its features computed on the warm-up request): both should
    be identical. batched_tiles runs cuDNN's convolutions (TF32 by its default) at batch 25, not
    1, which may pick another algorithm: ~1e-4 on a probability, so a value within that of a
    rounding boundary moves by one level (1/255), and a pixel within that of 0.5 may flip in or
    out of the changed area (0.01 ha each): the same answer is at most one level on a small
    fraction of the pixels and the areas within a few pixels."""
    pa, pb = a["prob"], b["prob"]
    if pa.shape != pb.shape or len(a["tile_ha"]) != len(b["tile_ha"]):
        return f"map {pa.shape} vs {pb.shape}: DIFFER"
    d = np.abs(pa.astype(np.int16) - pb.astype(np.int16))
    dt = np.max(np.abs(np.array(a["tile_ha"]) - np.array(b["tile_ha"])))
    return (f"map {pa.shape}: max |d| {int(d.max())} levels, {np.mean(d > 0):.1e} of pixels "
            f"differ, {np.mean(d > 1):.1e} by more than one; changed {a['changed_ha']:.2f} vs "
            f"{b['changed_ha']:.2f} ha, max |d| per tile {dt:.2f} ha")


if __name__ == "__main__":
    sys.exit(main({"nowcast": cmp_nowcast, "protvar": cmp_protvar, "changedet": cmp_changedet},
                  __doc__.split("\n\n")[0]))
