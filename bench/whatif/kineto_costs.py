"""The what-if tables' torch.profiler rows under other per-event costs: every fix measured
beyond noise, predicted from its torch.profiler trace with ``KINETO_NS_PER_EVENT`` replaced
(python_function, cpu_op, cuda_runtime, in ns), and how many fall within ±30% of measured.

    python bench/whatif/kineto_costs.py PY,OP,RUNTIME|- OUT.json [RESULTS_DIR=W=N,...]...

``-`` keeps the costs as they are. Each further argument is a results folder and its
workloads' requests per pass (``compare.py --requests``); by default the three folders of the
docs' tables.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT = [f"{HERE}/results/h200=",
           f"{HERE}/results/h200-blind=vision=8,moe=6,detect=6,hf_generate=4,churn=6",
           f"{HERE}/results/h100-readback=readback=6,stopcheck=6"]


def main() -> None:
    from zym.analysis import replay

    sys.path.insert(0, str(HERE))
    import compare

    if sys.argv[1] != "-":
        names = ("python_function", "cpu_op", "cuda_runtime")
        replay.KINETO_NS_PER_EVENT.update(zip(names, map(int, sys.argv[1].split(","))))
    rows = []
    for spec in sys.argv[3:] or DEFAULT:
        folder, _, req = spec.partition("=")
        requests = {w: int(n) for w, n in (x.split("=") for x in req.split(",") if x)}
        for r in compare.compare(Path(folder), requests or None):
            if r.source == "torch.profiler":
                rows.append({"folder": Path(folder).name, "workload": r.workload,
                             "variant": r.variant, "predicted_ms": r.predicted_ms,
                             "measured_ms": r.measured_ms, "agrees": r.agrees,
                             "noise": r.noise})
    real = [r for r in rows if not r["noise"] and r["predicted_ms"] is not None]
    Path(sys.argv[2]).write_text(json.dumps({"costs": replay.KINETO_NS_PER_EVENT,
                                             "rows": rows}, indent=1))
    print(replay.KINETO_NS_PER_EVENT, "within ±30% (beyond noise):",
          sum(bool(r["agrees"]) for r in real), "/", len(real))
    for r in real:
        print(f"  {r['workload']} {r['variant']}: {r['predicted_ms']:.2f} / "
              f"{r['measured_ms']:.2f} ms = {r['predicted_ms'] / r['measured_ms']:.2f}")


if __name__ == "__main__":
    main()
