"""Load A/B: two versions' ``load_one.py`` runs interleaved (each in its own process and
interpreter, a fresh store each time), medians and spread.

    python bench/fleet/ab/load_ab.py PAIRS A_PYTHON A_STAGE B_PYTHON B_STAGE WORK_DIR
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    pairs = int(sys.argv[1])
    work = Path(sys.argv[6])
    runs = {"A": [sys.argv[2], str(HERE / "load_one.py"), sys.argv[3], str(work / "store-a")],
            "B": [sys.argv[4], str(HERE / "load_one.py"), sys.argv[5], str(work / "store-b")]}
    times: dict[str, list[float]] = {k: [] for k in runs}
    rows: dict[str, dict] = {}
    for _ in range(pairs):
        for k, cmd in runs.items():
            out = json.loads(subprocess.run(cmd, capture_output=True, text=True,
                                            check=True).stdout)
            times[k].append(out["s"])
            rows[k] = out["rows"]
    for k, v in times.items():
        m = statistics.median(v)
        g, total = rows[k]["gpu_ops"], sum(rows[k].values())
        print(json.dumps({"variant": k, "median_s": round(m, 2), "min_s": round(min(v), 2),
                          "max_s": round(max(v), 2), "n": len(v), "gpu_op_rows_per_s": round(g / m),
                          "range_gpu_op_rows_per_s": [round(g / max(v)), round(g / min(v))],
                          "all_rows_per_s": round(total / m), "rows": rows[k]}))
    ratio = [b / a for a, b in zip(times["A"], times["B"])]
    print(json.dumps({"B/A per pair": [round(statistics.median(ratio), 2),
                                       round(min(ratio), 2), round(max(ratio), 2)],
                      "A_s": [round(x, 2) for x in times["A"]],
                      "B_s": [round(x, 2) for x in times["B"]]}))


if __name__ == "__main__":
    main()
