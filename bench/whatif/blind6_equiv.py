"""The sixth blind round: every variant of ctseg, cliptag and mottrack against base on the same
request (the client sees the same results), before they are measured (needs torch).

    python3 bench/whatif/blind6_equiv.py [--device cpu] [--only ctseg]

How each variant runs, and the CPU's smaller sizes: bench/whatif/equivalence.py (each
variant now under harness.active, as it is measured; until round 50 under inference mode
alone, the same for these services: none turns TF32 on).
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from equivalence import main


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
    sys.exit(main({"ctseg": cmp_ct, "cliptag": cmp_clip, "mottrack": cmp_mot},
                  __doc__.split("\n\n")[0]))
