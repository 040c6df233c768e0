"""Turn calibrate.py's GEMM survey into analysis/gemm_rates.yaml (what zym's speed-up estimates
read): achieved TFLOP/s by math and problem size, the median over the shapes of each size.

    python bench/whatif/gemm_table.py CALIBRATION.json [...] > analysis/gemm_rates.yaml
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from statistics import median


def main() -> int:
    rows, sources, gpu = [], [], None
    for path in sys.argv[1:]:
        doc = json.loads(Path(path).read_text())
        gpu = gpu or doc["gpu"]
        rows += doc.get("gemm", [])
        sources.append(f"{path} (torch {doc['torch']})")
    by = defaultdict(list)
    for r in rows:
        gflop = 2 * r["m"] * r["k"] * r["n"] / 1e9
        by[(r["math"], round(gflop, 3))].append(r["tflops"])
    print("# Achieved GEMM throughput on the GPUs named, measured by bench/whatif/calibrate.py")
    print("# (torch matmul, cuBLAS's own kernel choice, median of 20 runs per shape; the median")
    print("# over the shapes of one size). TFLOP/s by math, at problem sizes in GFLOP")
    print("# (2*M*N*K/1e9). Read by zym.analysis.throughput; regenerate with")
    print("# bench/whatif/gemm_table.py.")
    print("gpus:")
    print(f"  - match: {gpu.replace('NVIDIA ', '')!r}")
    print(f"    source: {'; '.join(sources)!r}")
    for math in ("fp32", "tf32", "fp16", "bf16"):
        points = sorted((g, median(v)) for (m, g), v in by.items() if m == math)
        print(f"    {math}: [{', '.join(f'[{g:g}, {t:.1f}]' for g, t in points)}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
