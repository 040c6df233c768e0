"""Costs that grow with something other than the number of events: `zym analyze` on synthetic
captures of one size and different shapes (bench/make_synthetic.py's ``Shape``).

Every capture has the same number of GPU operations (and ~1.3x as many calls); each shape
changes one thing from the default (400 call sites, stacks 15-30 frames deep, 300 kernel
names, 4 threads, 2 streams, 1 GPU, 1 process) to a value real services reach: tens of
thousands of call sites, stacks hundreds of frames deep, a distinct kernel name per launch
(JIT-compiled kernels), dozens of threads, streams, GPUs or processes. A cost that grows with
the events alone takes the same time on each; one that grows with the changed thing shows as
a ratio to the default shape far above 1.

Rounds rotate through the shapes (the default first in each round's order, then the others,
the order shifted each round), fresh processes of the CLI as users run it
(``zym analyze CAPTURE --format json --no-progress``, rules on, the numba cache warm: one run
of each capture first, not counted). Wall time of the whole process and the peak of its
process tree's RSS (bench_scale.run_measured). Reported per shape: median (min-max) wall and
peak, and the median of each round's ratio to the default shape.

    python bench/shape_scale.py [--ops 1000000] [--rounds 3] [--zym PATH] [--only a,b]
        [--json out.json]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import run_measured, write_json
from make_synthetic import Shape, make

SHAPES: dict[str, Shape] = {
    "default": Shape(),
    "sites-20k": Shape(sites=20_000, python_frames=4_000),
    "depth-200": Shape(depth=200, python_frames=2_000),
    "kernel-names-per-launch": Shape(kernel_names=10_000_000),
    "threads-64": Shape(threads=64),
    "streams-32": Shape(streams=32),
    "devices-8": Shape(devices=8),
    "processes-8": Shape(threads=16, processes=8),
}


def capture(name: str, ops: int, folder: Path) -> Path:
    path = folder / f"shape-{name}-{ops}.parquet"
    if not path.exists():
        make(ops, path, shape=SHAPES[name])
    return path


def spread(values: list[float], fmt: str = ".2f") -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--zym", default="zym", help="the console script to run")
    parser.add_argument("--only", help="comma-separated shape names (default: all)")
    parser.add_argument("--folder", type=Path, default=Path("bench/out/shapes"))
    parser.add_argument("--json", type=Path, help="write the raw runs here")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(SHAPES)
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        parser.error(f"unknown shape(s): {', '.join(unknown)} (known: {', '.join(SHAPES)})")
    if shutil.which(args.zym) is None:
        parser.error(f"{args.zym}: no such program (--zym: the zym console script to run)")
    names = ["default", *[n for n in dict.fromkeys(names) if n != "default"]]  # the base first
    args.folder = args.folder.resolve()
    args.folder.mkdir(parents=True, exist_ok=True)
    paths = {n: capture(n, args.ops, args.folder) for n in names}
    def command(path: Path) -> list[str]:
        return [args.zym, "analyze", str(path), "--format", "json", "--no-progress"]

    for n in names:  # warm: numba's cache, the page cache
        done = subprocess.run(command(paths[n]), check=False, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        if done.returncode:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            parser.exit(2, f"shape_scale.py: zym analyze failed on {paths[n]}: {last}\n")
    runs: dict[str, list[dict]] = {n: [] for n in names}
    others = names[1:]
    for r in range(args.rounds):
        k = r % len(others) if others else 0
        for n in ["default", *others[k:], *others[:k]]:
            row = run_measured(command(paths[n]))
            runs[n].append(row)
            print(f"round {r + 1} {n}: {row['wall_s']:.2f} s, {row['tree_mb']:.0f} MB", flush=True)
    print(f"\n{args.ops:,} GPU operations each; wall s and peak MB: median (min-max); "
          "ratio to default: median of the rounds' ratios")
    base = runs["default"]
    summary = {}
    for n in names:
        walls = [x["wall_s"] for x in runs[n]]
        peaks = [x["tree_mb"] for x in runs[n]]
        wr = [x["wall_s"] / b["wall_s"] for x, b in zip(runs[n], base)]
        pr = [x["tree_mb"] / b["tree_mb"] for x, b in zip(runs[n], base)]
        summary[n] = {"wall_ratio": statistics.median(wr), "peak_ratio": statistics.median(pr)}
        print(f"{n:26s} wall {spread(walls)}  peak {spread(peaks, '.0f')}  "
              f"x{statistics.median(wr):.2f} time, x{statistics.median(pr):.2f} peak")
    if args.json:
        write_json(args.json, {"ops": args.ops, "zym": args.zym, "runs": runs,
                               "shapes": {n: repr(SHAPES[n]) for n in names},
                               "summary": summary})


if __name__ == "__main__":
    main()
