"""`zym --help` start-up against bare Python, interleaved (issue 15: < 0.1 s above bare Python).

Each round runs, one after another in a rotating order, fresh processes of:

* ``bare``: ``python -c pass`` with the same interpreter (its site, the editable install's path
  finder if any, included);
* ``zym --help``: the installed console script, as users run it (cli/entry.py);
* ``typer app --help``: the typer app's own help (``from zym.cli.main import app; app()``),
  which is what the console script ran before cli/entry.py answered the top-level help.

Wall time of the whole process (fork/exec to exit). Reported: each job's median (min-max) and,
per round, each job minus ``bare`` (median, min-max).

    python bench/bench_help.py [--rounds 15] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def jobs() -> dict[str, list[str]]:
    zym = shutil.which("zym", path=str(Path(sys.executable).parent)) or "zym"
    return {
        "bare": [sys.executable, "-c", "pass"],
        "zym --help": [zym, "--help"],
        "typer app --help": [sys.executable, "-c", ("import sys; sys.argv[0] = 'zym'; "
                             "from zym.cli.main import app; app()"), "--help"],
    }


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", type=Path, help="write the raw rounds here")
    args = parser.parse_args()
    todo = jobs()
    for cmd in todo.values():  # warm the page cache and the .pyc files
        wall(cmd)
    names = list(todo)
    rounds = []
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        rounds.append({name: wall(todo[name]) for name in order})

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})"

    print(f"{args.rounds} interleaved rounds")
    for name in names:
        print(f"  {name:18} {spread([r[name] for r in rounds])}")
    for name in names[1:]:
        print(f"  {name} - bare: {spread([r[name] - r['bare'] for r in rounds])}")
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()
