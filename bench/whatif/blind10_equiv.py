"""The tenth blind round: every variant of spkdiar and docparse against base on the same
request (the client sees the same results), before they are measured (needs torch).

    python3 bench/whatif/blind10_equiv.py [--device cpu] [--only spkdiar]

How each variant runs, and the CPU's smaller sizes: bench/whatif/equivalence.py.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from equivalence import main


def cmp_spkdiar(a, b):
    """The number of speakers and per segment its times, speaker and confidence. bulk_scores
    computes the same similarities as one (segments x speakers) matrix product rather than a
    matrix-vector product per segment (another summation order: ~1e-7 on a confidence), the
    speakers untouched (the clustering is the same code on the same embeddings): identical
    speakers, confidences within ~1e-6. batched_segments runs the convolutions at batch 48 on
    padded segments, not batch 1 (cuDNN may pick another algorithm; float32, no TF32) and pools
    with masked sums: ~1e-6 relative on the embeddings, so confidences within ~1e-5; the
    speakers are the same unless a segment's similarity to its best centroid is within that
    noise of the clustering threshold, which would relabel that segment and possibly the later
    ones (reported as the share of segments whose speaker differs)."""
    sa, sb = a["segments"], b["segments"]
    if len(sa) != len(sb) or any((x["start_s"], x["end_s"]) != (y["start_s"], y["end_s"])
                                 for x, y in zip(sa, sb)):
        return "segments DIFFER"
    lab = np.mean([x["speaker"] != y["speaker"] for x, y in zip(sa, sb)])
    dc = np.max(np.abs(np.array([x["confidence"] for x in sa])
                       - np.array([y["confidence"] for y in sb])))
    spread = np.std([x["confidence"] for x in sa])
    return (f"{len(sa)} segments, speakers {a['speakers']} vs {b['speakers']}, {lab:.2f} of "
            f"segments with another speaker; confidence max |d| {dc:.1e} (spread {spread:.1e})")


def cmp_docparse(a, b):
    """The lines in reading order, each its text, confidence and box. gpu_preprocess runs
    the same float64 arithmetic on the GPU (its mean and standard deviation summed in another
    order: the last bits of a float64, rarely one float32 ulp of an ink value), so identical or
    nearly. batched_lines runs the convolutions at batch ~27 on padded lines, not batch 1
    (cuDNN may pick another algorithm; float32, no TF32), and standardises each line with
    masked sums: ~1e-6 relative on the log-probabilities, so confidences within ~1e-6 and the
    same texts unless two characters' log-probabilities in a column are within that noise (a
    character or so in a page, counted). bulk_decode takes the same argmax and a masked mean
    in place of each line's mean (another summation order: ~1e-7 on a confidence): the same
    texts. The reading order is the geometric prior's (the learned term is bounded by 0.3, the
    prior's steps are 1 or more): the same order for every variant."""
    if [x["box"] for x in a] != [y["box"] for y in b]:
        return "reading order DIFFERS"
    texts = sum(x["text"] != y["text"] for x, y in zip(a, b))
    chars = sum(len(x["text"]) for x in a)
    diff = sum(sum(p != q for p, q in zip(x["text"], y["text"])) + abs(len(x["text"])
               - len(y["text"])) for x, y in zip(a, b))
    dc = np.max(np.abs(np.array([x["confidence"] for x in a])
                       - np.array([y["confidence"] for y in b])))
    return (f"{len(a)} lines in the same order, {texts} texts differ ({diff} of {chars} "
            f"characters); confidence max |d| {dc:.1e} "
            f"(spread {np.std([x['confidence'] for x in a]):.1e})")


if __name__ == "__main__":
    sys.exit(main({"spkdiar": cmp_spkdiar, "docparse": cmp_docparse},
                  __doc__.split("\n\n")[0]))
