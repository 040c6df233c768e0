"""The eleventh blind round: every variant of motionfc and vocalsep against base on the same
request (the client sees the same results), before they are measured (needs torch).

    python3 bench/whatif/blind11_equiv.py [--device cpu] [--only motionfc]

How each variant runs, and the CPU's smaller sizes: bench/whatif/equivalence.py.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from equivalence import main


def cmp_motionfc(a, b):
    """Per agent its id, the 6 modes' probabilities (sorted) and their (6, 60, 2) UTM
    trajectories. packed_upload uploads the same values in fewer copies and map_cache reuses
    lane tokens computed by the same code on the same tile: identical (max |d| 0).
    sdpa_history computes the temporal attention in one fused kernel rather than matmul,
    softmax, matmul (another summation order; float32, no TF32): ~1e-6 relative on the agent
    tokens, so probabilities within ~1e-6 and trajectories within ~1e-4 m (tens of metres of
    float32 scene-frame displacement put back into UTM in float64). Two modes whose
    probabilities are within that noise could swap places in the sorted order; the modes are
    matched by trajectory before differencing and such swaps counted."""
    if [x["id"] for x in a] != [y["id"] for y in b]:
        return "agents DIFFER"
    swapped, dp, dt = 0, 0.0, 0.0
    for x, y in zip(a, b):
        tx, ty = x["trajectories"], y["trajectories"]
        dist = np.abs(tx[:, None] - ty[None]).max((2, 3))  # (modes of a, modes of b)
        match = dist.argmin(1)
        swapped += int((match != np.arange(len(match))).any())
        dt = max(dt, float(dist[np.arange(len(match)), match].max()))
        dp = max(dp, float(np.abs(x["probs"] - y["probs"][match]).max()))
    spread = np.std(np.concatenate([x["trajectories"].reshape(-1, 2) for x in a]), 0).max()
    return (f"{len(a)} agents, {swapped} with modes in another order; probability max |d| "
            f"{dp:.1e}, trajectory max |d| {dt:.1e} m (spread {spread:.1e} m)")


def cmp_vocalsep(a, b):
    """Per stem its (samples, 2) int16 PCM, and the melody (a MIDI pitch or None per frame).
    keep_cache changes no arithmetic: identical. gpu_istft inverts the same complex128
    spectrograms in float64 with cuFFT instead of numpy's pocketfft (~1e-16 relative): the
    same int16 samples unless one sits within that of a rounding boundary (0 or a few samples
    off by one). float32_stft computes the spectrogram in float32 (~1e-7 relative), so the
    U-Nets' inputs move by that (the GPU's cuDNN convolutions run TF32 by default, where such
    a move can change an input's rounding: masks within ~1e-4 at worst), and the stems' PCM is
    the same but for +-1 on a small share of samples (a few LSB at most); the melody is the
    same unless two pitch candidates' emission scores are within that noise in some frame
    (reported as frames that differ)."""
    out = []
    for k, x in a["stems"].items():
        y = b["stems"][k]
        if x.shape != y.shape:
            return f"{k} shape DIFFERS"
        d = np.abs(x.astype(np.int32) - y.astype(np.int32))
        out.append(f"{k} max |d| {d.max()} LSB ({(d > 0).mean():.1e} of samples)")
    ma, mb = a["melody"], b["melody"]
    if len(ma) != len(mb):
        return "melody length DIFFERS"
    frames = sum(p != q for p, q in zip(ma, mb))
    voiced = sum(p is not None for p in ma)
    return ", ".join(out) + f"; melody {frames} of {len(ma)} frames differ ({voiced} voiced)"


if __name__ == "__main__":
    sys.exit(main({"motionfc": cmp_motionfc, "vocalsep": cmp_vocalsep},
                  __doc__.split("\n\n")[0]))
