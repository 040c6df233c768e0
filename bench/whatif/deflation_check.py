"""How well zym takes torch.profiler's own cost out of a trace: for each kept torch.profiler
trace whose service was also timed without the profiler (``W.measure.json``), the unfixed
replay of the window with the recording's cost taken out (``Timeline.fidelity``'s
``uninstrumented_ns``, per step) against the measured baseline request, and the recorded step.
What every saving of a torch.profiler trace is taken from.

    python bench/whatif/deflation_check.py PY,OP,RUNTIME[,BUILTIN]|- OUT.json [RESULTS_DIR=W=N,...]...

``-`` keeps ``KINETO_NS_PER_EVENT`` as it is; else its python_function, cpu_op, cuda_runtime
and (optionally) python_builtin costs in ns, as ``kineto_costs.py`` takes them. Each further
argument is a results folder and its workloads' requests per pass (zym's steps in one traced
pass); by default every folder of the docs' what-if tables. Prints one line per trace and the median |log(replayed / measured)|, and how
many are within ±15% and ±30%.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
R = HERE / "results"
DEFAULT = [f"{R}/h200=gpt_decode=7,rerank=12,decode_loop=6",
           f"{R}/h200-blind=vision=8,moe=6,detect=6,hf_generate=4,churn=6",
           f"{R}/h100-readback=readback=6,stopcheck=6",
           f"{R}/h100-blind2=recsys=12,beam=6,asr=6,preproc=8",
           f"{R}/h100-blind3=diffusion=30,kvcache=96,embedsvc=8",
           f"{R}/h100-blind4=segserve=4,gnnserve=3,ttsvoc=22",
           f"{R}/h100-blind5=lineocr=8,tsanomaly=6,shelfscan=6",
           f"{R}/h100-grad=encoder=6,graddecode=6,gradvision=6",
           f"{R}/h100-layout=convlayout=6", f"{R}/h100-tf32=tf32mlp=6",
           f"{R}/h100-blind6=ctseg=2,cliptag=4,mottrack=4"]


def timed_traces(specs: list[str], script: str) -> list[tuple[Path, str, Path, float]]:
    """Each kept torch.profiler trace of ``specs`` (``RESULTS_DIR=W=N,...``, as
    ``kineto_costs.folders`` reads them) whose service was also timed without the profiler:
    ``(folder, workload, trace, measured ms a request)``."""
    from kineto_costs import folders

    out = []
    for folder, requests in folders(specs, script):
        for w, n in requests.items():
            traces = [p for p in (folder / "kineto" / f"{w}.parquet",
                                  folder / "kineto" / f"{w}.trace.json.gz") if p.exists()]
            measure = folder / f"{w}.measure.json"
            if traces and measure.exists():
                doc = json.loads(measure.read_text())
                out.append((folder, w, traces[0],
                            doc["variants"]["base"]["median_s"] * 1e3 / n))
    return out


def main() -> None:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    from bench_scale import write_json
    from kineto_costs import fail, set_costs

    if len(sys.argv) < 3:
        fail("usage: deflation_check.py PY,OP,RUNTIME[,BUILTIN]|- OUT.json "
             "[RESULTS_DIR=W=N,...]...", "deflation_check")
    from zym.analysis import analyze, replay

    set_costs(sys.argv[1], "deflation_check")
    rows = []
    for folder, w, trace, real in timed_traces(sys.argv[3:] or DEFAULT, "deflation_check"):
        a = analyze(trace)
        steps = a.steps_in_window()
        count = len(steps.start_ns) if steps is not None else 1
        fid = a.timeline.fidelity
        rows.append({"folder": folder.name, "workload": w, "measured_ms": real,
                     "recorded_ms": fid["recorded_ns"] / count / 1e6,
                     "replayed_ms": fid["uninstrumented_ns"] / count / 1e6,
                     "taken_ms": fid["profiler_overhead_ns"] / count / 1e6,
                     "recording_slowdown": a.recording_slowdown})
    errors = [abs(math.log(r["replayed_ms"] / r["measured_ms"])) for r in rows]
    summary = {"costs": dict(replay.KINETO_NS_PER_EVENT), "traces": len(rows),
               "median_abs_log": statistics.median(errors) if errors else None,
               "mean_abs_log": statistics.mean(errors) if errors else None,
               "within_15pct": sum(e < math.log(1.15) for e in errors),
               "within_30pct": sum(e < math.log(1.3) for e in errors)}
    write_json(Path(sys.argv[2]), {"summary": summary, "rows": rows})
    for r in rows:
        print(f"{r['folder']:14s} {r['workload']:12s} measured {r['measured_ms']:8.2f} ms  "
              f"recorded {r['recorded_ms']:8.2f}  replayed without the profiler "
              f"{r['replayed_ms']:8.2f} ({r['replayed_ms'] / r['measured_ms']:.2f}x)  "
              f"taken out {r['taken_ms']:7.2f}")
    print(summary)


if __name__ == "__main__":
    main()
