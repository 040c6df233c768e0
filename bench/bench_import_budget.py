"""`zym import` as users run it, two ways, interleaved A/B pairs: e.g. the trace imported whole
(a budget it fits in) against out of core (the default budget), or an older install against
this one.

Each pair runs ``ZYM import TRACE -o OUT --no-progress --force [ARGS]`` for A and for B,
fresh processes, in alternating order; wall time is the whole process, CPU time the user +
system seconds of its process tree, peak memory the summed RSS of its process tree sampled
every 20 ms (``bench_scale.run_measured``). After the first pair the two captures are compared
by content (``tests/same_tables.py``: ids resolved to frames and stack paths, rows as sorted
multisets); the run stops if they differ. Reported: each side's median (min-max) and B/A per
pair.

    python bench/bench_import_budget.py TRACE --a ZYM [--a-args "--memory-budget 100T"] \\
        --b ZYM [--b-args "..."] [--pairs 7] [--json out.json]
"""
from __future__ import annotations

import argparse
import resource
import shlex
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_ab import summarize
from bench_scale import run_measured, write_json


def one(zym: str, trace: Path, out: Path, extra: list[str]) -> dict:
    cmd = [zym, "import", str(trace), "-o", str(out), "--no-progress", "--force", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    row = run_measured(cmd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return row | {"cpu_s": (after.ru_utime + after.ru_stime)
                  - (before.ru_utime + before.ru_stime)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--a", required=True, help="zym console script of A")
    parser.add_argument("--b", required=True, help="zym console script of B")
    parser.add_argument("--a-args", default="", help="more arguments for A's import")
    parser.add_argument("--b-args", default="", help="more arguments for B's import")
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--work", type=Path, default=None,
                        help="folder for the captures (default: a temporary one)")
    args = parser.parse_args()
    from same_tables import differences

    pairs = []
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        outs = {"a": Path(tmp) / "a.parquet", "b": Path(tmp) / "b.parquet"}
        extra = {"a": shlex.split(args.a_args), "b": shlex.split(args.b_args)}
        for i in range(args.pairs):
            order = ("a", "b") if i % 2 == 0 else ("b", "a")
            pair = {s: one(getattr(args, s), args.trace.resolve(), outs[s], extra[s])
                    for s in order}
            if i == 0:
                diff = differences(outs["a"], outs["b"])
                pair["same_content"] = not diff
                if diff:
                    sys.exit(f"the captures differ: {diff}")
            pairs.append(pair)
            print(f"pair {i + 1}: A {pair['a']['wall_s']:.2f} s ({pair['a']['cpu_s']:.2f} CPU) "
                  f"{pair['a']['tree_mb']:.0f} MB, B {pair['b']['wall_s']:.2f} s "
                  f"({pair['b']['cpu_s']:.2f} CPU) {pair['b']['tree_mb']:.0f} MB", flush=True)

    summarize(pairs)
    if args.json:
        write_json(args.json, {"trace": str(args.trace), "a": args.a, "b": args.b,
                               "a_args": args.a_args, "b_args": args.b_args, "pairs": pairs})


if __name__ == "__main__":
    main()
