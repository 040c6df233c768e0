"""The twelfth blind round: every variant of ecgtriage and facegate against base on the same
request (the client sees the same results), before they are measured (needs torch).

    python3 bench/whatif/blind12_equiv.py [--device cpu] [--only ecgtriage]

How each variant runs, and the CPU's smaller sizes: bench/whatif/equivalence.py.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from equivalence import main


def cmp_ecgtriage(a, b):
    """Per recording the six rhythm probabilities, the heart rate, and per beat its sample,
    label and confidence. bulk_readback copies the same float32 probabilities back in one
    piece: identical (max |d| 0). gpu_filter runs the same float64 band-pass with cuFFT
    instead of numpy's pocketfft (~1e-16 relative), then rounds to float32: the same float32
    signal unless a sample sits within that of a rounding boundary (then one ulp), so the
    rhythm probabilities within ~1e-7 and the same R peaks, unless two candidate peaks' heights
    tie to that precision. batched_beats runs the beat classifier on one batch of every beat
    rather than a batch of one per beat: on the GPU cuDNN may pick other convolution
    algorithms for the larger batch, and with its default TF32 convolutions the logits move by
    up to ~1e-3 relative (on the CPU ~1e-7), so confidences within ~1e-3 and the same labels
    unless a beat's two best classes are that close (counted as labels that differ)."""
    if len(a) != len(b):
        return "recordings DIFFER"
    dp = dc = dhr = 0.0
    peaks_differ = labels = beats = 0
    for x, y in zip(a, b):
        dp = max(dp, max(abs(x["rhythm"][k] - y["rhythm"][k]) for k in x["rhythm"]))
        if (x["heart_rate"] is None) != (y["heart_rate"] is None):
            return "heart rate DIFFERS"
        if x["heart_rate"] is not None:
            dhr = max(dhr, abs(x["heart_rate"] - y["heart_rate"]))
        if [p["sample"] for p in x["beats"]] != [p["sample"] for p in y["beats"]]:
            peaks_differ += 1
            continue
        beats += len(x["beats"])
        for p, q in zip(x["beats"], y["beats"]):
            labels += p["label"] != q["label"]
            dc = max(dc, abs(p["confidence"] - q["confidence"]))
    flags = sum(x["flags"] != y["flags"] for x, y in zip(a, b))
    return (f"{len(a)} recordings ({peaks_differ} with other R peaks, {flags} other flags); "
            f"rhythm max |d| {dp:.1e}, heart rate max |d| {dhr:.1e} bpm; {beats} beats, "
            f"{labels} labels differ, confidence max |d| {dc:.1e}")


def cmp_facegate(a, b):
    """Per camera its faces (box, detection score, person or None, similarity) and whether the
    gate opens. uint8_upload normalises the same uint8 values with the same float32 operations
    (a subtraction and a division by a power of two, both exact) on the GPU: identical frames,
    so identical results (max |d| 0). gpu_gallery computes the same float32 similarities with
    cuBLAS (TF32 off) instead of the host's BLAS, another summation order: within ~1e-7, the
    same person unless the best two templates tie to that precision. batched_crops samples the
    same pixels, but affine_grid's matrix product over all the faces' grids at once may take
    another kernel than over one face's (~1e-7 in the grids' coordinates, a few 1e-7 in the
    crops; on the CPU none), and with the embedder's default TF32 convolutions on the GPU that
    becomes up to ~1e-4 in the similarities: the same people unless the best two templates are
    within that (counted as persons that differ). Boxes and detection scores come before any
    of these: identical throughout."""
    if len(a) != len(b):
        return "cameras DIFFER"
    faces = persons = gates = 0
    dbox = dscore = dsim = 0.0
    for x, y in zip(a, b):
        if len(x["faces"]) != len(y["faces"]):
            return f"camera {x['camera']}: face count DIFFERS"
        gates += x["open"] != y["open"]
        for p, q in zip(x["faces"], y["faces"]):
            faces += 1
            dbox = max(dbox, float(np.abs(np.subtract(p["box"], q["box"])).max()))
            dscore = max(dscore, abs(p["score"] - q["score"]))
            persons += p["person"] != q["person"]
            dsim = max(dsim, abs(p["similarity"] - q["similarity"]))
    return (f"{faces} faces: box max |d| {dbox:.1e} px, score max |d| {dscore:.1e}; "
            f"{persons} persons differ, similarity max |d| {dsim:.1e}; {gates} gates differ")


if __name__ == "__main__":
    sys.exit(main({"ecgtriage": cmp_ecgtriage, "facegate": cmp_facegate},
                  __doc__.split("\n\n")[0]))
