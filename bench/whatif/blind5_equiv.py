"""The fifth blind round: every variant of lineocr, tsanomaly and shelfscan against base on the same
request (the client sees the same results), before they are measured (needs torch).

    python3 bench/whatif/blind5_equiv.py [--device cpu] [--only lineocr]
"""
import argparse
import sys

import numpy as np
import torch

sys.path.insert(0, "bench/whatif/workloads")
import lineocr
import shelfscan
import tsanomaly


def run(mod, variant, device):
    svc = mod.build(variant, device)
    with torch.inference_mode():
        svc.handle(svc.requests[0])  # warm-up
        return svc.handle(svc.requests[0])


def cmp_ocr(a, b):
    assert len(a) == len(b), "line counts differ"
    same = np.mean([x["text"] == y["text"] for x, y in zip(a, b)])
    words = np.mean([x["words"] == y["words"] for x, y in zip(a, b)])
    conf = max(abs(x["confidence"] - y["confidence"]) for x, y in zip(a, b))
    return (f"same text {same:.4f} of {len(a)} lines, same lexicon ranks {words:.4f}, "
            f"max |d conf| {conf:.2e}")


def cmp_ts(a, b):
    d = float(np.abs(a["score"] - b["score"]).max() / np.abs(a["score"]).max())
    ev = [(e["start"], e["end"], e["peak"]) for e in a["events"]]
    ev_b = [(e["start"], e["end"], e["peak"]) for e in b["events"]]
    peak = max((abs(x["peak_score"] - y["peak_score"]) for x, y in zip(a["events"], b["events"])),
               default=0.0)
    thr = abs(a["threshold"] - b["threshold"])
    same = "same" if ev == ev_b else "DIFFER"
    return (f"max |d score|/max score {d:.2e}, |d threshold| {thr:.2e}, events {same} "
            f"({len(ev)} vs {len(ev_b)}), max |d peak score| {peak:.2e}")


def cmp_shelf(a, b):
    da = [d for photo in a for d in photo]
    db = [d for photo in b for d in photo]
    assert len(da) == len(db), "detection counts differ"
    boxes = all(x["box"] == y["box"] for x, y in zip(da, db))
    top1 = np.mean([x["products"][0] == y["products"][0] for x, y in zip(da, db)])
    top5 = np.mean([set(x["products"]) == set(y["products"]) for x, y in zip(da, db)])
    dp = max(abs(x["probs"][0] - y["probs"][0]) / x["probs"][0] for x, y in zip(da, db))
    return (f"boxes {'same' if boxes else 'DIFFER'}, top-1 agreement {top1:.4f}, same top-5 set "
            f"{top5:.4f} of {len(da)} detections, max relative |d top-1 prob| {dp:.2e}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", default="")
    a = p.parse_args()
    for mod, cmp in ((lineocr, cmp_ocr), (tsanomaly, cmp_ts), (shelfscan, cmp_shelf)):
        if a.only and mod.__name__ != a.only:
            continue
        base = run(mod, "base", a.device)
        for v in mod.VARIANTS:
            if v != "base":
                print(f"{mod.__name__:9s} {v:19s} {cmp(base, run(mod, v, a.device))}", flush=True)
