"""The eighth blind round: every variant of kwspot, vecsearch and vidsr against base on the same
request (the client sees the same results), before they are measured (needs torch).

    python3 bench/whatif/blind8_equiv.py [--device cpu] [--only kwspot]

How each variant runs, and the CPU's smaller sizes: bench/whatif/equivalence.py.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from equivalence import main


def cmp_kws(a, b):
    """Per clip, the 12 keyword confidences (maxima of the smoothed posteriors) within float
    noise: up to ~1e-4 is expected and 1e-3 would still be noise (base's features are float64
    numpy cast to float32, gpu_features' float32 torch, a log-mel difference of ~1e-6 that the
    stem convolution, TF32 by cuDNN's default, can turn into a TF32 rounding step here and
    there; batched_streams runs the convolutions at another batch size, which may pick another
    cuDNN algorithm); bulk_decode alone should give identical numbers. Everything else is
    decided on those numbers, so the same answer means: the same keyword (or none) unless the
    best confidence is within that noise of the threshold, the same peak time unless two frames'
    smoothed posteriors are that close, the same speech span and ratio unless a frame's voice
    probability is that close to 0.5. Counted, not required: the random-weight net's posteriors
    are smooth in time, so a moved peak frame is possible and would not be a different answer."""
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} clips: DIFFER"
    dconf = max(float(np.max(np.abs(np.array(x["scores"]) - np.array(y["scores"]))))
                for x, y in zip(a, b))
    keyword = sum(x["keyword"] == y["keyword"] for x, y in zip(a, b))
    peak = sum(x["time_s"] == y["time_s"] for x, y in zip(a, b))
    speech = sum(x["speech"] == y["speech"] and x["speech_ratio"] == y["speech_ratio"]
                 for x, y in zip(a, b))
    hits = sum(x["keyword"] is not None for x in a), sum(y["keyword"] is not None for y in b)
    return (f"{len(a)} clips: max |d confidence| {dconf:.1e}; same keyword {keyword}, same peak "
            f"time {peak}, same speech span and ratio {speech}; {hits[0]} vs {hits[1]} "
            f"keywords detected")


def cmp_search(a, b):
    """Per question, the 10 passages after reranking: the same ids in the same order, their
    cross-encoder scores within float noise (all float32, TF32 off; dynamic_padding changes
    the matmuls' row counts and the attention's masked length, so reductions run in another
    order: ~1e-6 relative, 1e-4 absolute would still be noise), retrieval scores identical for
    resident_index and gpu_topk (the same matmul on the same numbers) and within ~1e-6 for
    dynamic_padding (the question embeddings' noise). Two candidates whose cross-encoder scores
    are within noise could swap places, or a passage within noise of the 16th retrieval score
    could enter or leave the reranked set: counted as questions whose list differs."""
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} questions: DIFFER"
    same = sum(x["ids"] == y["ids"] for x, y in zip(a, b))
    overlap = np.mean([len(set(x["ids"]) & set(y["ids"])) / len(x["ids"]) for x, y in zip(a, b)])
    ds = dr = 0.0
    for x, y in zip(a, b):
        sy = dict(zip(y["ids"], zip(y["scores"], y["retrieval"])))
        for i, s, r in zip(x["ids"], x["scores"], x["retrieval"]):
            if i in sy:
                ds, dr = max(ds, abs(s - sy[i][0])), max(dr, abs(r - sy[i][1]))
    return (f"{len(a)} questions: same ranked ids {same}, mean overlap {overlap:.3f}; for the "
            f"same passage max |d rerank score| {ds:.1e}, max |d retrieval score| {dr:.1e}")


def cmp_vsr(a, b):
    """The motion identical (whole pixels from a phase-correlation peak of ~0.9 against ~0.01
    elsewhere: float32 on the GPU cannot move it), and the uint8 frames: gpu_motion and gpu_pack
    alone should be bit-identical (the same float32 clamp, multiply and round-half-to-even on
    either side); shared_features runs cuDNN's TF32 convolutions at another batch size (10
    frames, not 24), which may pick another algorithm, ~1e-4 on an output in [0, 1], so a
    value within that of a rounding boundary can move by one level: the same answer is at most
    one level anywhere, on a small fraction of the values (PSNR against base far above 50 dB)."""
    fa, fb = a["frames"], b["frames"]
    motion = "same motion" if a["motion"] == b["motion"] else "motion DIFFERS"
    if fa.shape != fb.shape:
        return f"{motion}; frames {fa.shape} vs {fb.shape}: DIFFER"
    d = np.abs(fa.astype(np.int16) - fb.astype(np.int16))
    mse = float(np.mean(d.astype(np.float64) ** 2))
    psnr = f"{10 * np.log10(255.0 ** 2 / mse):.1f} dB" if mse else "inf"
    return (f"{motion}; frames {fa.shape}: max |d| {int(d.max())} levels, {np.mean(d > 0):.1e} "
            f"of values differ, {np.mean(d > 1):.1e} by more than one; PSNR {psnr}")


if __name__ == "__main__":
    sys.exit(main({"kwspot": cmp_kws, "vecsearch": cmp_search, "vidsr": cmp_vsr},
                  __doc__.split("\n\n")[0]))
