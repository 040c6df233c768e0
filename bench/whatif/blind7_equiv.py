"""The seventh blind round: every variant of lidardet, posekpt and fraudscore against base on the
same request (the client sees the same results), before they are measured (needs torch).

    python3 bench/whatif/blind7_equiv.py [--device cpu] [--only lidardet]

How each variant runs, and the CPU's smaller sizes: bench/whatif/equivalence.py.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from equivalence import main


def cmp_lidar(a, b):
    """Detections matched by class and nearest centre (scores within float noise can reorder
    near-equal detections; TF32 convolutions amplify last-bit input differences)."""
    matched, ds, db = 0, 0.0, 0.0
    for label in {d["label"] for d in a}:
        xa = [d for d in a if d["label"] == label]
        xb = [d for d in b if d["label"] == label]
        if not xb:
            continue
        ba, bb = np.array([d["box"] for d in xa]), np.array([d["box"] for d in xb])
        dist = np.linalg.norm(ba[:, None, :2] - bb[None, :, :2], axis=-1)
        j = dist.argmin(1)
        ok = dist[np.arange(len(xa)), j] < 0.05
        matched += int(ok.sum())
        if ok.any():
            db = max(db, float(np.abs(ba[ok] - bb[j[ok]]).max()))
            sa = np.array([d["score"] for d in xa])[ok]
            ds = max(ds, float(np.abs(sa - np.array([d["score"] for d in xb])[j[ok]]).max()))
    return (f"{len(a)} vs {len(b)} detections, {matched} matched (same class, centre within "
            f"5 cm), among them max |d score| {ds:.1e}, max |d box| {db:.1e}")


def cmp_pose(a, b):
    """Keypoints: within 0.05 px, and how many moved to another heatmap peak (more than a cell;
    the random-weight net's heatmaps have near-tied maxima that TF32 noise can swap)."""
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} people: DIFFER"
    ka = np.array([p["keypoints"] for p in a])
    kb = np.array([p["keypoints"] for p in b])
    d = np.abs(ka[..., :2] - kb[..., :2]).max(-1)
    dc = np.abs(ka[..., 2] - kb[..., 2]).max()
    dp = max(abs(x["score"] - y["score"]) for x, y in zip(a, b))
    moved = int(np.sum(d > 2.0))
    return (f"{len(a)} people, keypoints within 0.05 px {np.mean(d < 0.05):.4f} of {d.size}, "
            f"median |d xy| {np.median(d):.1e} px, {moved} moved to another peak; max |d conf| "
            f"{dc:.1e}, max |d person score| {dp:.1e}")


def cmp_fraud(a, b):
    pa, pb = np.array(a["probs"]), np.array(b["probs"])
    rel = np.max(np.abs(pa - pb) / pa)
    ra = {x["index"]: x["reasons"] for x in a["alerts"]}
    rb = {x["index"]: x["reasons"] for x in b["alerts"]}
    common = ra.keys() & rb.keys()
    same = sum(ra[i] == rb[i] for i in common)
    return (f"max relative |d prob| {rel:.1e} of {len(pa)}, alerts {len(ra)} vs {len(rb)} "
            f"({len(common)} common), same reason codes {same} of {len(common)}")


if __name__ == "__main__":
    sys.exit(main({"lidardet": cmp_lidar, "posekpt": cmp_pose, "fraudscore": cmp_fraud},
                  __doc__.split("\n\n")[0]))
