"""Which of zym's compiled loops numba compiles when one machine analyses several inputs in a
row, starting from an empty cache: a loop is compiled once per set of argument types, so an
input whose arrays reach a loop with other types (an integer width, a read-only flag) pays
that loop's compile again (the sparse replay: ~5 s).

Each round gives numba a new, empty cache folder (``NUMBA_CACHE_DIR``) and runs, for each
install, ``zym analyze INPUT --format json --no-progress`` (the CLI's own entry, whole
process, rules on) for every input in order, with that install's folder shared by its runs.
Reported per run: its wall time and each loop numba compiled (name, seconds, thread, and
the helpers compiled inside it), from numba's compile events (``bench_compile.per_loop``'s
process); the installs alternate which goes first each round, and each input's reports must
be the same across installs.

    python bench/compile_sequence.py --python A_VENV/bin/python [--python B_VENV/bin/python]
        INPUT [INPUT ...] [--rounds 2] [--json out.json]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_compile import per_loop
from bench_scale import fail, write_json


def run(python: str, path: Path, cache: str) -> dict:
    """One run, whole process (wall); the loops numba compiled in it, as each finished."""
    t = time.perf_counter()
    loops, report = per_loop(python, path, cache)
    compiles = [{"loop": name.rsplit(".", 1)[1], "depth": depth, "s": round(s, 3),
                 "thread": thread} for depth, name, s, thread in loops]
    return {"input": str(path), "wall_s": round(time.perf_counter() - t, 3),
            "compiles": compiles, "report": report}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", type=Path, nargs="+")
    ap.add_argument("--python", action="append", required=True,
                    help="the python of an install to measure (give it once per install)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    for p in args.inputs:
        if not p.is_file():
            fail(f"{p}: no such file")
    rows = []
    for r in range(args.rounds):
        order = args.python if r % 2 == 0 else args.python[::-1]
        reports: dict[str, str] = {}
        for python in order:
            with tempfile.TemporaryDirectory(prefix="zym-numba-seq-") as cache:
                for path in args.inputs:
                    got = run(python, path, cache)
                    same = reports.setdefault(str(path), got["report"]) == got["report"]
                    outer = [c for c in got["compiles"] if c["depth"] == 0]
                    loops = ", ".join(f"{c['loop']} {c['s']:.2f} s" for c in outer)
                    print(f"round {r + 1} {python} {path.name}: {got['wall_s']:.2f} s, "
                          f"compiled {sum(c['s'] for c in outer):.2f} s "
                          f"({loops or 'nothing'}); same report: {same}")
                    rows.append({"round": r + 1, "python": python, "same_report": same,
                                 **{k: v for k, v in got.items() if k != "report"}})
    if args.json:
        write_json(args.json, {"inputs": [str(p) for p in args.inputs], "runs": rows})


if __name__ == "__main__":
    main()
