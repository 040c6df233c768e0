"""The fourth blind round: every variant of segserve, gnnserve and ttsvoc against base on the same
request (the client sees the same results), before they are measured (needs torch).

    python3 bench/whatif/blind4_equiv.py [--device cpu] [--only segserve]
"""
import argparse
import sys

import numpy as np
import torch

sys.path.insert(0, "bench/whatif/workloads")
import gnnserve
import segserve
import ttsvoc


def run(mod, variant, device):
    svc = mod.build(variant, device)
    with torch.inference_mode():
        svc.handle(svc.requests[0])  # warm-up (fills ttsvoc's voice cache)
        return svc.handle(svc.requests[0])


def cmp_seg(a, b):
    agree = min(float((x["labels"] == y["labels"]).mean()) for x, y in zip(a, b))
    worst = 0.0
    for x, y in zip(a, b):
        cx = {c["class"]: c for c in x["classes"]}
        for c in y["classes"]:
            if c["class"] in cx:
                worst = max(worst, abs(c["mean_conf"] - cx[c["class"]]["mean_conf"]),
                            abs(c["fraction"] - cx[c["class"]]["fraction"]))
    return f"label agreement (worst tile) {agree:.5f}, worst |d conf|,|d fraction| {worst:.2e}"


def cmp_gnn(a, b):
    return f"max |d score| {np.abs(np.array(a) - np.array(b)).max():.2e} over {len(a)} graphs"


def cmp_tts(a, b):
    assert [len(x) for x in a] == [len(y) for y in b], "lengths differ"
    d = max(float(np.abs(x - y).max()) for x, y in zip(a, b))
    peak = max(float(np.abs(x).max()) for x in a)
    return f"same lengths; max |d sample| {d:.2e} (peak |sample| {peak:.3f})"


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", default="")
    a = p.parse_args()
    for mod, cmp in ((segserve, cmp_seg), (gnnserve, cmp_gnn), (ttsvoc, cmp_tts)):
        if a.only and mod.__name__ != a.only:
            continue
        base = run(mod, "base", a.device)
        for v in mod.VARIANTS:
            if v != "base":
                print(f"{mod.__name__:9s} {v:17s} {cmp(base, run(mod, v, a.device))}", flush=True)
