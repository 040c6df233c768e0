"""The thirteenth blind round: every variant of docqa and goeval against base on the same
request (the client sees the same results), before they are measured (needs torch).

    python3 bench/whatif/blind13_equiv.py [--device cpu] [--only docqa]

How each variant runs, and the CPU's smaller sizes: bench/whatif/equivalence.py.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from equivalence import main


def cmp_docqa(a, b):
    """The question's answer (text or None, passage, score, no-answer score) and per passage its
    best span (first and last word) and score. gpu_spans searches the same float32 logits for the
    same spans: topk gives the same 20 best starts and ends, in the same order, as the host's
    argsorts (unless two logits tie exactly), the pair scores are the same float32 sums, and argmax
    over the (start rank, end rank) grid picks the same first best as the host's double loop with
    its strict '>': identical (max |d| 0), on the CPU and on the GPU. pad_to_longest gives the real
    tokens the same ids, segments and positions with fewer padding columns; padded keys get
    finfo.min added, so exactly zero attention weight, and only the shapes change: cuBLAS (TF32
    off, harness's default) or the CPU's BLAS may pick other kernels for the other number of rows,
    and the softmax sums fewer exact zeros, so the logits move by up to ~1e-6 relative, scores by
    ~1e-5 (of ~20; on this CPU not at all). sdpa computes the same masked attention fused (on CUDA
    in float32 the memory-efficient kernel, with the scale applied inside it; on the CPU its flash
    kernel): another summation order, again ~1e-6 relative in the logits. A span can change only
    where two candidate pairs' scores are that close, and the answer only where its margin over the
    no-answer score is that close to the threshold (both counted); the threshold is set on each
    device by one path for every variant: the same. tf32 (added after zym's first analysis)
    runs the encoder's matmuls with 10-bit mantissas on the GPU: the logits move by ~1e-3
    relative, scores by up to ~1e-2; on the CPU it changes nothing."""
    spans = sum((p["start"], p["end"]) != (q["start"], q["end"])
                for p, q in zip(a["passages"], b["passages"]))
    ds = max((abs(p["score"] - q["score"]) for p, q in zip(a["passages"], b["passages"])
              if p["score"] is not None and q["score"] is not None), default=0.0)
    same = (a["answer"], a["passage"]) == (b["answer"], b["passage"])
    dn = abs(a["null_score"] - b["null_score"])
    kind = "answered" if a["answer"] is not None else "no answer"
    return (f"answer {'same' if same else 'DIFFERS'} ({kind}); {len(a['passages'])} passages, "
            f"{spans} spans differ, "
            f"score max |d| {ds:.1e}, no-answer score |d| {dn:.1e}")


def cmp_goeval(a, b):
    """Per leaf its value, best move and prior over its legal moves. gpu_planes builds the same
    0/1 float32 planes with the same comparisons and the same symmetry gathers on the device:
    identical inputs, identical results (max |d| 0). batched_leaves runs the same boards as one
    batch of 256 instead of 32 batches of eight: batch norm (eval) and the heads work row by
    row, but the convolutions' algorithms are picked per shape (cuDNN on the GPU, oneDNN on the
    CPU), and on the GPU they run in TF32 (torch.backends.cudnn.allow_tf32, on by default), so
    the logits move by up to ~1e-3 relative there (on the CPU ~1e-6 or not at all): priors and
    values within ~1e-3. fp16 runs the tower and heads under float16 autocast (11 bits of
    mantissa, ~5e-4 relative an operation, the same as the TF32 convolutions the GPU's float32
    base already runs; activations far below float16's range; channels-last only changes the
    layout), the softmax and averages in float32: at full size (on the CPU, three leaves)
    priors moved by up to 8e-4, values by 1.6e-3 and the best move's prior by 0.4% relative,
    so priors within ~1e-3, values within a few 1e-3, best priors within ~1% relative; the best
    move differs where the best two priors are that close (counted)."""
    if len(a) != len(b) or any(x["priors"].keys() != y["priors"].keys() for x, y in zip(a, b)):
        return "legal moves DIFFER"
    dv = max(abs(x["value"] - y["value"]) for x, y in zip(a, b))
    dp = max(abs(p - y["priors"][m]) for x, y in zip(a, b) for m, p in x["priors"].items())
    rel = max(abs(x["priors"][x["best"]] - y["priors"][x["best"]]) / x["priors"][x["best"]]
              for x, y in zip(a, b))
    best = sum(x["best"] != y["best"] for x, y in zip(a, b))
    return (f"{len(a)} leaves: value max |d| {dv:.1e}, prior max |d| {dp:.1e} (best move's "
            f"relative {rel:.1e}); {best} best moves differ")


if __name__ == "__main__":
    sys.exit(main({"docqa": cmp_docqa, "goeval": cmp_goeval}, __doc__.split("\n\n")[0]))
