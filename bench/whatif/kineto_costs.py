"""The what-if tables' torch.profiler rows under other per-event costs: every fix measured
beyond noise, predicted from its torch.profiler trace with ``KINETO_NS_PER_EVENT`` replaced
(python_function, cpu_op, cuda_runtime and, if given, python_builtin, in ns), and how many
fall within ±30% of measured.

    python bench/whatif/kineto_costs.py PY,OP,RUNTIME[,BUILTIN]|- OUT.json [RESULTS_DIR=W=N,...]...

``-`` keeps the costs as they are. Each further argument is a results folder and its
workloads' requests per pass (``compare.py --requests``); by default the three folders of the
docs' tables.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT = [f"{HERE}/results/h200=",
           f"{HERE}/results/h200-blind=vision=8,moe=6,detect=6,hf_generate=4,churn=6",
           f"{HERE}/results/h100-readback=readback=6,stopcheck=6"]


NAMES = ("python_function", "cpu_op", "cuda_runtime", "python_builtin")


def fail(message: str, script: str = "kineto_costs") -> None:
    print(f"{script}: {message}", file=sys.stderr)
    sys.exit(2)


def set_costs(arg: str, script: str = "kineto_costs") -> None:
    """``KINETO_NS_PER_EVENT`` from ``PY,OP,RUNTIME[,BUILTIN]`` (ns); ``-`` leaves it."""
    from zym.analysis import replay

    if arg == "-":
        return
    costs = arg.split(",")
    if len(costs) not in (3, 4) or not all(c.isdigit() for c in costs):
        fail("costs must be three or four whole numbers of ns (PY,OP,RUNTIME[,BUILTIN]): "
             f"{arg!r}", script)
    replay.KINETO_NS_PER_EVENT.update(zip(NAMES, map(int, costs)))


def folders(specs: list[str], script: str = "kineto_costs") -> list[tuple[Path, dict[str, int]]]:
    """Each ``RESULTS_DIR=W=N,...`` as the folder and its workloads' requests per pass."""
    out = []
    for spec in specs:
        folder, _, req = spec.partition("=")
        if not Path(folder).is_dir():
            fail(f"{folder}: no such results folder", script)
        try:
            out.append((Path(folder), {w: int(n) for w, n in
                                       (x.split("=") for x in req.split(",") if x)}))
        except ValueError:
            fail(f"requests must be W=N,...: {req!r}", script)
    return out


def main() -> None:
    from zym.analysis import replay

    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    import compare
    from bench_scale import write_json

    if len(sys.argv) < 3:
        fail("usage: kineto_costs.py PY,OP,RUNTIME[,BUILTIN]|- OUT.json [RESULTS_DIR=W=N,...]...")
    set_costs(sys.argv[1])
    rows = []
    for folder, requests in folders(sys.argv[3:] or DEFAULT):
        for r in compare.compare(folder, requests or None):
            if r.source == "torch.profiler":
                rows.append({"folder": folder.name, "workload": r.workload,
                             "variant": r.variant, "predicted_ms": r.predicted_ms,
                             "measured_ms": r.measured_ms, "agrees": r.agrees,
                             "noise": r.noise})
    real = [r for r in rows if not r["noise"] and r["predicted_ms"] is not None]
    write_json(Path(sys.argv[2]), {"costs": replay.KINETO_NS_PER_EVENT, "rows": rows})
    print(replay.KINETO_NS_PER_EVENT, "within ±30% (beyond noise):",
          sum(bool(r["agrees"]) for r in real), "/", len(real))
    for r in real:
        print(f"  {r['workload']} {r['variant']}: {r['predicted_ms']:.2f} / "
              f"{r['measured_ms']:.2f} ms = {r['predicted_ms'] / r['measured_ms']:.2f}")


if __name__ == "__main__":
    main()
