"""The fifteenth blind round: every variant of nerlink and transcribe against base on the same
request (the client sees the same results), before they are measured (needs torch).

    python3 bench/whatif/blind15_equiv.py [--device cpu] [--only nerlink]

How each variant runs, and the CPU's smaller sizes: bench/whatif/equivalence.py.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from equivalence import main


def cmp_nerlink(a, b):
    """Per story its mentions (words, position, type), each one's linked entity (or None), its
    score and its five candidates (ids and scores). cached_wordpiece takes each raw word's
    pieces from a cache filled by the same function (word_pieces) on the word's first sight:
    the same ids, the same encoder input, identical (max |d| 0). host_viterbi copies the
    emissions to the host and runs the CRF's Viterbi with numpy: the same float32 additions in
    the same order ((score + transitions) + emission: IEEE additions round the same on either
    side), the same maxima and the same back-pointers, so the same tags (an argmax could differ
    only at an exact tie of two float32 sums, none seen), hence the same mentions, vectors and
    links, identical (max |d| 0). matmul_linking scores the mentions against the table
    L2-normalised once at load with one matrix product (float32: TF32 matmuls are off,
    harness's default) instead of F.cosine_similarity's elementwise product and sum over the
    256 dimensions: the same normalisation, another summation order, so the scores move by
    ~1e-7 (on the GPU up to ~1e-6); a candidate's rank changes only where two scores are that
    close, a link only where the best score is that close to the threshold (both counted).
    all: as matmul_linking."""
    ma = [(m["words"], m["type"]) for s in a["stories"] for m in s["mentions"]]
    mb = [(m["words"], m["type"]) for s in b["stories"] for m in s["mentions"]]
    if ma != mb:
        return f"MENTIONS DIFFER: {len(ma)} vs {len(mb)}"
    xa = [m for s in a["stories"] for m in s["mentions"]]
    xb = [m for s in b["stories"] for m in s["mentions"]]
    links = sum(x["entity_id"] != y["entity_id"] for x, y in zip(xa, xb))
    cands = sum(p[0] != q[0] for x, y in zip(xa, xb)
                for p, q in zip(x["candidates"], y["candidates"]))
    ds = max((abs(p[1] - q[1]) for x, y in zip(xa, xb)
              for p, q in zip(x["candidates"], y["candidates"])), default=0.0)
    linked = sum(x["entity_id"] is not None for x in xa)
    return (f"{len(xa)} mentions the same ({linked} linked), {links} links differ, "
            f"{cands}/{5 * len(xa)} candidates differ; scores max |d| {ds:.1e}")


def cmp_transcribe(a, b):
    """Per segment its pieces (the text), their number and their mean log-probability.
    pad_to_longest pads the batch to its longest segment (a multiple of 640 samples) instead
    of 30 s: every valid frame sees the same samples (zeros past a segment's end either way,
    the STFT framed without reflection), the padded frames are zeroed before the convolutions
    and each depthwise convolution and masked out of every attention (an additive finfo.min:
    exactly zero weight), so the valid frames get the same values up to the summation order of
    kernels run over other lengths (the mel matmul, the attention's softmax over 750 or ~375
    keys, GEMMs of other shapes: float32, TF32 off), ~1e-6 relative; the log-probabilities
    move by up to ~1e-5 and a piece changes only where the best two are that close (counted,
    with everything after it). cross_kv_once projects the memory's cross-attention keys and
    values once per request: the same matrix product of the same memory that base repeats at
    every step, identical (max |d| 0). fused_layernorm computes the layer norms with
    F.layer_norm (one pass, the variance by Welford's method, rsqrt) instead of the
    written-out mean, variance, square root and division: ~1e-7 relative per norm, the
    log-probabilities within ~1e-5, pieces as for pad_to_longest. all: all three together."""
    sa, sb = a["segments"], b["segments"]
    differ = [i for i, (x, y) in enumerate(zip(sa, sb)) if x["tokens"] != y["tokens"]]
    first = min((next(j for j, (p, q) in enumerate(zip(sa[i]["tokens"] + [-1],
                                                        sb[i]["tokens"] + [-2])) if p != q)
                 for i in differ), default=None)
    dl = max(abs(x["avg_logprob"] - y["avg_logprob"]) for x, y in zip(sa, sb)
             if x["tokens"] == y["tokens"]) if len(differ) < len(sa) else float("nan")
    pieces = sum(x["pieces"] for x in sa)
    where = "" if first is None else f" (first at piece {first})"
    return (f"{len(sa)} segments, {pieces} pieces: {len(differ)} transcripts differ{where}; "
            f"mean log-prob max |d| {dl:.1e}")


if __name__ == "__main__":
    sys.exit(main({"nerlink": cmp_nerlink, "transcribe": cmp_transcribe},
                  __doc__.split("\n\n")[0]))
