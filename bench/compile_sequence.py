"""Which of zym's compiled loops numba compiles when one machine analyses several inputs in a
row, starting from an empty cache: a loop is compiled once per set of argument types, so an
input whose arrays reach a loop with other types (an integer width, a read-only flag) pays
that loop's compile again (the sparse replay: ~5 s).

Each round gives numba a new, empty cache folder (``NUMBA_CACHE_DIR``) and runs, for each
install, ``zym analyze INPUT --format json --no-progress`` (the CLI's own entry, whole
process, rules on) for every input in order, with that install's folder shared by its runs.
Reported per run: its wall time and each loop numba compiled (name, seconds, thread), from
numba's compile events; the installs alternate which goes first each round, and each
input's reports must be the same across installs.

    python bench/compile_sequence.py --python A_VENV/bin/python [--python B_VENV/bin/python]
        INPUT [INPUT ...] [--rounds 2] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import fail, write_json

_CHILD = r"""
import io, json, sys, threading, time
from numba.core import event
t0, starts, out = time.perf_counter(), {}, []
class Compiles(event.Listener):
    def on_start(self, ev):
        starts[(id(ev.data.get("dispatcher")), threading.get_ident())] = time.perf_counter()
    def on_end(self, ev):
        d = ev.data.get("dispatcher")
        t = starts.pop((id(d), threading.get_ident()), None)
        f = getattr(d, "py_func", None)
        if t is not None and f is not None and f.__module__.startswith("zym."):
            out.append({"loop": f.__name__, "at_s": round(t - t0, 3),
                        "s": round(time.perf_counter() - t, 3),
                        "thread": threading.current_thread().name})
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
print(json.dumps({"compiles": out, "report": report.getvalue()}))
"""


def run(python: str, path: Path, cache: str) -> dict:
    env = os.environ | {"NUMBA_CACHE_DIR": cache}
    t = time.perf_counter()
    done = subprocess.run([python, "-c", _CHILD, str(path.resolve())], check=False,
                          capture_output=True,
                          text=True, env=env, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t
    if done.returncode:
        fail(f"{python} on {path}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return {"input": str(path), "wall_s": round(wall, 3), "compiles": got["compiles"],
            "report": got["report"]}


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
                    loops = ", ".join(f"{c['loop']} {c['s']:.2f} s" for c in got["compiles"])
                    print(f"round {r + 1} {python} {path.name}: {got['wall_s']:.2f} s, "
                          f"compiled {sum(c['s'] for c in got['compiles']):.2f} s "
                          f"({loops or 'nothing'}); same report: {same}")
                    rows.append({"round": r + 1, "python": python, "same_report": same,
                                 **{k: v for k, v in got.items() if k != "report"}})
    if args.json:
        write_json(args.json, {"inputs": [str(p) for p in args.inputs], "runs": rows})


if __name__ == "__main__":
    main()
