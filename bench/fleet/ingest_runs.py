"""Whole `zym fleet ingest` as users run it: the console script in a new process (Python's
start, imports, chDB's engine, hashing, analysis where a capture is not staged, the load),
each run into a fresh store; wall time of the process, CPU time (user + system) of it and
its worker processes, its JSON result (GPU-op rows, staged
count, its own split). Several zym installs (or flags) are interleaved run by run.

    python bench/fleet/ingest_runs.py --runs 7 --work /tmp/w FLEET_DIR \\
        --variant staged=/venv/bin/zym --variant raw=/venv/bin/zym:--no-staged [-j 2] [--n N]
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("fleet", type=Path)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--n", type=int, default=0, help="first N captures (0: all)")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--variant", action="append", required=True,
                    help="NAME=ZYM[:EXTRA ARGS, comma-separated]")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    files = [str(f) for f in sorted(a.fleet.glob("host*.parquet"))]
    files = files[:a.n] if a.n else files
    variants = {}
    for v in a.variant:
        name, rest = v.split("=", 1)
        zym, _, extra = rest.partition(":")
        variants[name] = [zym, *[x for x in extra.split(",") if x]]
    runs: dict[str, list[dict]] = {k: [] for k in variants}
    for i in range(a.runs):
        order = list(variants) if i % 2 == 0 else list(variants)[::-1]
        for name in order:
            store = a.work / f"store-{name}"
            shutil.rmtree(store, ignore_errors=True)
            cmd = [*variants[name][:1], "fleet", "ingest", "--store", str(store), "-j",
                   str(a.j), "-f", "json", *variants[name][1:], *files]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, check=True)
            wall = time.perf_counter() - t
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            out = json.loads(p.stdout)
            runs[name].append({"wall_s": wall, "cpu_s": cpu, **out})
            print(f"run {i + 1} {name}: {wall:.2f} s ({cpu:.1f} s CPU, all processes), "
                  f"{out['rows']['gpu_ops'] / wall / 1e3:.0f} k "
                  f"GPU-op rows/s (staged {out.get('staged')}, analysis {out['analysis_s']} s, "
                  f"checks {out.get('check_s')} s, load {out['load_s']} s)", flush=True)
    for name, rs in runs.items():
        w = [r["wall_s"] for r in rs]
        g = rs[0]["rows"]["gpu_ops"]
        m = statistics.median(w)
        print(json.dumps({"variant": name, "captures": len(files), "gpu_ops": g, "n": len(w),
                          "median_s": round(m, 2), "min_s": round(min(w), 2),
                          "max_s": round(max(w), 2), "gpu_op_rows_per_s": round(g / m),
                          "range_rows_per_s": [round(g / max(w)), round(g / min(w))],
                          "cpu_s_median": round(statistics.median(r["cpu_s"] for r in rs), 1),
                          "load_s_median": statistics.median(r["load_s"] for r in rs),
                          "check_s_median": statistics.median(r.get("check_s", 0) for r in rs)}))
    if a.json:
        a.json.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
