"""Decoding ahead off and on (``ZYM_DECODE_AHEAD=0/1``, one install) where a core is free:
pairs of `zym analyze A` or `zym diff A B` (``--format json``, rules on, the whole process),
in alternating order, each pair started only when fewer tasks are runnable than cores (the
4th field of /proc/loadavg), as the command itself checks before it decodes ahead. On a
machine shared with other work, that is the condition the mechanism is for; the pairs show
what it saves there. Wall seconds and CPU seconds (user + system of the process tree).

    python bench/bench_ahead_free_core.py --zym VENV/bin/zym analyze A.json.gz \\
        [--pairs 9] [--minutes 5] [--json out.json]
    python bench/bench_ahead_free_core.py --zym VENV/bin/zym diff A.json.gz B.json.gz
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import time
from pathlib import Path


def running() -> int:
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[0])


def one(cmd: list[str], mode: str) -> tuple[float, float]:
    """Wall and CPU seconds of ``cmd`` with decoding ahead ``mode`` ("0" off, "1" on)."""
    env = {**os.environ, "ZYM_DECODE_AHEAD": mode}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, env=env, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zym", default="zym")
    ap.add_argument("command", choices=("analyze", "diff"))
    ap.add_argument("inputs", nargs="+", type=Path)
    ap.add_argument("--pairs", type=int, default=9)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cmd = [args.zym, args.command, *map(str, args.inputs), "--format", "json", "--no-progress"]
    cores = os.cpu_count() or 1
    pairs: list[dict[str, tuple[float, float]]] = []
    deadline = time.time() + 60 * args.minutes
    while len(pairs) < args.pairs and time.time() < deadline:
        if running() >= cores:
            time.sleep(0.2)
            continue
        order = ("0", "1") if len(pairs) % 2 == 0 else ("1", "0")
        pairs.append({mode: one(cmd, mode) for mode in order})
        print(len(pairs), {m: tuple(round(x, 3) for x in v) for m, v in pairs[-1].items()},
              flush=True)
    if not pairs:
        raise SystemExit("no core was free")
    for mode in ("0", "1"):
        print(f"ZYM_DECODE_AHEAD={mode}: wall s {spread([p[mode][0] for p in pairs])}, "
              f"CPU s {spread([p[mode][1] for p in pairs])}")
    print(f"on/off wall per pair: {spread([p['1'][0] / p['0'][0] for p in pairs])}, "
          f"{len(pairs)} pairs")
    if args.json:
        args.json.write_text(json.dumps({"command": cmd, "pairs": pairs}, indent=1))


if __name__ == "__main__":
    main()
