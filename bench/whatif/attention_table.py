"""Write ``analysis/attention_costs.yaml`` (what a fused attention kernel takes against the two
batched matmuls of attention written out by hand, by the matmuls' math and their GPU time)
from ``bench/whatif/attention_cost.py`` results:

    python bench/whatif/attention_table.py RESULT.json [RESULT.json ...]

Each measured shape is a point (the two matmuls' GPU time in microseconds, the fused kernel's
time over theirs), per math: float32 with TF32 off (``fp32``), on (``tf32``), bfloat16,
float16. zym reads the curve through the points (``zym.analysis.attention.fused_ratio``).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MATH = {"float32": "fp32", "float32_tf32": "tf32", "bfloat16": "bf16", "float16": "fp16"}
# Shapes whose two matmuls take less than this between CUDA events are left out: the events
# time the host's launches there, not the kernels (two bmm calls take ~35 us of an H100 host's
# time, a fused call ~20 us: bench/whatif/sdpa_dispatch.py), so their ratio is the host's.
MIN_PAIR_US = 100


def main(paths: list[str]) -> int:
    points: dict[str, list[list[float]]] = {m: [] for m in MATH.values()}
    gpus, sources = set(), []
    for p in paths:
        doc = json.loads(Path(p).read_text())
        gpus.add(doc["gpu"])
        sources.append(f"{Path(p).resolve().relative_to(ROOT)} ({doc['gpu']}, torch "
                       f"{doc['torch']})")
        for row in doc["rows"]:
            if row["bmm_pair_ms"] * 1e3 < MIN_PAIR_US:
                continue
            points[MATH[row["dtype"]]].append([round(row["bmm_pair_ms"] * 1e3, 1),
                                               round(row["sdpa_over_bmm"], 3)])
    lines = [
        "# What a fused attention kernel (F.scaled_dot_product_attention: flash or memory-",
        "# efficient attention) takes on the GPU against the two batched matmuls of the same",
        "# attention written out by hand (q @ k^T, then probs @ v), by the matmuls' math: points",
        "# [the two matmuls' GPU time (us), the fused kernel's time over theirs], one a shape",
        "# measured by bench/whatif/attention_cost.py (CUDA events, median of the runs); shapes",
        f"# whose matmuls take under {MIN_PAIR_US} us are left out (the events time the host's",
        "# launches there).",
        "# Regenerate with bench/whatif/attention_table.py. Read by",
        "# zym.analysis.attention.fused_ratio.",
        f"source: '{'; '.join(sources)}'",
        f"gpus: '{', '.join(sorted(gpus))}'",
        "fused_over_matmuls:",
    ]
    for math, pts in points.items():
        if pts:
            pts.sort()
            lines.append(f"  {math}: {json.dumps(pts)}")
    (ROOT / "analysis" / "attention_costs.yaml").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
