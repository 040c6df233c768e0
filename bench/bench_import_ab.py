"""Kineto import, in process, two zym installs A and B interleaved.

Each round starts a fresh process of A's and of B's Python (alternating which goes first),
which imports the trace ``--reps`` times with ``zym.capture.kineto.load_kineto`` (JSON
decode + call-stack tables + validation, no analysis, no rules, no writing) after one
warm-up import, and prints the fastest and the median of its reps, wall and CPU time (all threads: on a
shared machine CPU time is the steadier figure). Reported: each side's
per-round median, median (min-max) over rounds, and B/A per round.

    python bench/bench_import_ab.py --a /venv-main/bin/python --b /venv-branch/bin/python \\
        TRACE [--rounds 7] [--reps 5] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

CHILD = """
import json, statistics, sys, time
from zym.capture.kineto import load_kineto
path, reps = sys.argv[1], int(sys.argv[2])
load_kineto(path)
times, cpu = [], []
for _ in range(reps):
    t, c = time.perf_counter(), time.process_time()
    tables, _ = load_kineto(path)
    times.append(time.perf_counter() - t)
    cpu.append(time.process_time() - c)
print(json.dumps({"median_s": statistics.median(times), "min_s": min(times),
                  "cpu_median_s": statistics.median(cpu), "cpu_min_s": min(cpu),
                  "rows": {k: v.height for k, v in tables.items()}}))
"""


def one(python: str, trace: Path, reps: int) -> dict:
    out = subprocess.run([python, "-c", CHILD, str(trace), str(reps)], check=True,
                         capture_output=True, text=True, cwd="/tmp")
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--a", required=True, help="python of install A (before)")
    parser.add_argument("--b", required=True, help="python of install B (after)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rounds = []
    for i in range(args.rounds):
        order = ("a", "b") if i % 2 == 0 else ("b", "a")
        r = {side: one(getattr(args, side), args.trace.resolve(), args.reps) for side in order}
        r["same_rows"] = r["a"]["rows"] == r["b"]["rows"]
        rounds.append(r)
        print(f"round {i + 1}: A {r['a']['median_s'] * 1e3:.1f} ms, B {r['b']['median_s'] * 1e3:.1f}"
              f" ms, same rows: {r['same_rows']}", flush=True)

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"

    summary = {}
    for side in ("a", "b"):
        ms = [r[side]["median_s"] * 1e3 for r in rounds]
        summary[side] = ms
        print(f"{side.upper()}: import ms, per-round median {spread(ms)}; per-round fastest "
              f"{spread([r[side]['min_s'] * 1e3 for r in rounds])}")
    ratio = [b / a for a, b in zip(summary["a"], summary["b"])]
    print(f"B/A of per-round medians: {statistics.median(ratio):.3f} "
          f"({min(ratio):.3f}-{max(ratio):.3f})")
    best = [r["b"]["min_s"] / r["a"]["min_s"] for r in rounds]
    print(f"B/A of per-round fastest: {statistics.median(best):.3f} "
          f"({min(best):.3f}-{max(best):.3f})")
    for side in ("a", "b"):
        print(f"{side.upper()}: CPU ms (all threads), per-round median "
              f"{spread([r[side]['cpu_median_s'] * 1e3 for r in rounds])}")
    cpu = [r["b"]["cpu_median_s"] / r["a"]["cpu_median_s"] for r in rounds]
    print(f"B/A of per-round CPU medians: {statistics.median(cpu):.3f} "
          f"({min(cpu):.3f}-{max(cpu):.3f})")
    if args.json:
        args.json.write_text(json.dumps({"trace": str(args.trace), "reps": args.reps,
                                         "a": args.a, "b": args.b, "rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()
