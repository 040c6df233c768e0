"""What numba's first run costs users: ``zym analyze INPUT`` with a cold cache of compiled loops
against the same command warm, as users run it (the CLI, rules on, whole process).

Each round gives numba a new, empty cache folder (``NUMBA_CACHE_DIR``, which numba tries
before any other), runs the command (cold: every loop the analysis reaches is compiled and
written there), then runs it again with the same folder (warm: loaded). Reported: the median
(min-max) of each, and of their difference per round (the compiling, as felt). The two
reports of a round must be the same.

``--per-loop`` also times numba's compile of each loop in one cold process of the measured
install's python (in process: the seconds inside numba's ``Dispatcher.compile`` for each loop
zym compiles, the loops they call included, nested ones indented, with the thread; a loop that
two threads reach at once is listed for each, the second's time being mostly a wait for
numba's compiler lock).

    python bench/bench_compile.py bench/out/synthetic-1m.parquet --zym /path/venv/bin/zym \\
        [--rounds 5] [--per-loop] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import fail, install_kind, run_measured, write_json

_PER_LOOP = r"""
import io, json, sys, threading, time
from numba.core import event
here, out = threading.local(), []
class Compiles(event.Listener):  # numba's compile events: compiles, not loads from a cache
    def on_start(self, ev):
        here.depth = getattr(here, "depth", 0) + 1
        here.starts = getattr(here, "starts", []) + [time.perf_counter()]
    def on_end(self, ev):
        t = here.starts.pop()
        here.depth -= 1
        f = getattr(ev.data.get("dispatcher"), "py_func", None)
        name = f"{f.__module__}.{f.__name__}" if f is not None else ""
        if name.startswith("zym."):
            out.append((here.depth, name, time.perf_counter() - t,
                        threading.current_thread().name))
event.register("numba:compile", Compiles())
sys.argv = ["zym", "analyze", sys.argv[1], "--format", "json", "--no-progress"]
from zym.cli import entry
def stop(code):
    raise SystemExit(code)
entry.os._exit = stop
sys.stdout = report = io.StringIO()
try:
    entry.main()
except SystemExit:
    pass
sys.stdout = sys.__stdout__
print(json.dumps({"loops": out, "report": report.getvalue()}))
"""


def run(zym: str, path: Path, cache: str, out: Path) -> dict:
    shell = (f"NUMBA_CACHE_DIR='{cache}' '{zym}' analyze '{path}' --format json "
             f"--no-progress > '{out}'")
    try:
        return run_measured(["bash", "-c", shell])
    except RuntimeError as e:  # zym said why on stderr: its last line
        fail(f"{path}: zym analyze failed: {str(e).strip().splitlines()[-1]}")


def per_loop(python: str, path: Path, cache: str | None = None
             ) -> tuple[list[tuple[int, str, float, str]], str]:
    """``zym analyze PATH`` in one process of ``python`` (numba's cache in ``cache``; None: a
    new, empty folder): each loop numba compiled (depth, name, seconds, thread), from its
    compile events (loads from the cache are none), and the report."""
    with tempfile.TemporaryDirectory(prefix="zym-bench-numba-") as empty:
        got = subprocess.run([python, "-c", _PER_LOOP, str(path.resolve())], check=False,
                             capture_output=True, text=True, cwd=tempfile.gettempdir(),
                             env=os.environ | {"NUMBA_CACHE_DIR": cache or empty})
    if got.returncode:
        fail(f"{path}: the per-loop run failed: {got.stderr.strip().splitlines()[-1:]}")
    done = json.loads(got.stdout.strip().splitlines()[-1])
    return [tuple(row) for row in done["loops"]], done["report"]


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", type=Path)
    ap.add_argument("--zym", help="the zym console script to measure (default: the one beside "
                    "this python)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-loop", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not args.input.is_file():
        fail(f"{args.input}: no such file")
    if args.rounds < 1:
        fail("--rounds: give 1 or more")
    zym = args.zym or str(Path(sys.executable).with_name("zym"))
    if not Path(zym).is_file():
        fail(f"{zym}: no such console script")
    python = install_kind(zym)["python"]  # (a zym command, whose python imports zym)
    rows = []
    with tempfile.TemporaryDirectory(prefix="zym-bench-compile-") as work:
        for r in range(args.rounds):
            cache = Path(work) / f"numba-{r}"
            cache.mkdir()
            cold = run(zym, args.input, str(cache), Path(work) / "cold.json")
            warm = run(zym, args.input, str(cache), Path(work) / "warm.json")
            same = ((Path(work) / "cold.json").read_bytes()
                    == (Path(work) / "warm.json").read_bytes())
            if not same:
                fail(f"round {r}: the cold and the warm report differ")
            rows.append({"cold_s": cold["wall_s"], "warm_s": warm["wall_s"],
                         "cold_mb": cold["tree_mb"], "warm_mb": warm["tree_mb"]})
            print(f"round {r}: cold {cold['wall_s']:.2f} s, warm {warm['wall_s']:.2f} s, "
                  "same report", flush=True)
    print(f"cold (compiles): {summary([r['cold_s'] for r in rows])}")
    print(f"warm (loads):    {summary([r['warm_s'] for r in rows])}")
    print(f"compiling, as felt (cold - warm per round): "
          f"{summary([r['cold_s'] - r['warm_s'] for r in rows])}")
    result = {"input": str(args.input), "zym": zym, "rounds": rows}
    if args.per_loop:
        loops, _report = per_loop(python, args.input)
        print("per loop, in process (seconds in numba's compile, callees included):")
        if not loops:
            print("  none: the analysis reached no compiled loop (too small)")
        for depth, name, seconds, thread in loops:
            print(f"  {seconds:6.2f} s  {'  ' * depth}{name}  [{thread}]")
        result["per_loop"] = [{"depth": d, "loop": n, "s": s, "thread": t}
                              for d, n, s, t in loops]
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
