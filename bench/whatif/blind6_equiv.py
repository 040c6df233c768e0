"""The sixth blind round: every variant of ctseg, cliptag and mottrack against base on the same
request (the client sees the same results), before they are measured (needs torch).

    python3 bench/whatif/blind6_equiv.py [--device cpu] [--only ctseg]

On the CPU the workloads' smaller sizes are used (WHATIF_SMALL=1, unless set otherwise): the
same code paths, in seconds rather than minutes.
"""
import argparse
import importlib
import os
import sys

import numpy as np
import torch

sys.path.insert(0, "bench/whatif/workloads")


def run(mod, variant, device):
    svc = mod.build(variant, device)
    with torch.inference_mode():
        svc.handle(svc.requests[0])  # warm-up
        return svc.handle(svc.requests[0])


def cmp_ct(a, b):
    same = float(np.mean(a["labels"] == b["labels"]))
    counts = all(x["voxels"] == y["voxels"] for x, y in zip(a["organs"], b["organs"]))
    hu = max(abs(x["mean_hu"] - y["mean_hu"]) for x, y in zip(a["organs"], b["organs"]))
    return (f"same label {same:.6f} of {a['labels'].size} voxels, organ voxel counts "
            f"{'same' if counts else 'DIFFER'}, max |d mean HU| {hu:.2e}")


def cmp_clip(a, b):
    tags = "same" if a["tags"] == b["tags"] else "DIFFER"
    dp = max(abs(x - y) / x for x, y in zip(a["probs"], b["probs"]))
    frames = np.mean([x == y for x, y in zip(a["frame_tags"], b["frame_tags"])])
    return (f"top-{len(a['tags'])} tags {tags}, max relative |d prob| {dp:.2e}, same frame tag "
            f"{frames:.4f} of {len(a['frame_tags'])} frames")


def cmp_mot(a, b):
    assert [len(f) for f in a] == [len(f) for f in b], "detection counts differ"
    ids_a = [i for f in a for i in f]
    ids_b = [i for f in b for i in f]
    same = np.mean([x == y for x, y in zip(ids_a, ids_b)])
    return (f"same track id {same:.4f} of {len(ids_a)} detections ({len(a)} frames, "
            f"{max(ids_a) + 1} tracks vs {max(ids_b) + 1})")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", default="")
    a = p.parse_args()
    if a.device == "cpu":
        os.environ.setdefault("WHATIF_SMALL", "1")
    for name, cmp in (("ctseg", cmp_ct), ("cliptag", cmp_clip), ("mottrack", cmp_mot)):
        if a.only and name != a.only:
            continue
        mod = importlib.import_module(name)
        base = run(mod, "base", a.device)
        for v in mod.VARIANTS:
            if v != "base":
                print(f"{name:9s} {v:15s} {cmp(base, run(mod, v, a.device))}", flush=True)
