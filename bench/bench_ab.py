"""Two zym installs, A and B, on one input, as users run them: interleaved A/B pairs.

Each round runs ``zym analyze INPUT --format json --no-progress`` (rules on unless
``--no-rules``) with A's and B's console script, fresh processes, in alternating order, and
checks that the two reports are the same (every key); with ``--command export``, ``zym export
INPUT -o OUT.pftrace --no-progress --force`` (a Perfetto timeline, findings on), and whether
the two traces are the same bytes. Wall time is the whole process; CPU
time the user + system seconds of its process tree; peak memory the summed RSS of its process
tree, sampled every 20 ms (bench_scale.run_measured). Reported: each side's median (min-max),
and B/A per pair (median, min-max).

    python bench/bench_ab.py --a /path/venv-main/bin/zym --b /path/venv-branch/bin/zym \\
        INPUT [--pairs 7] [--no-rules] [--json out.json] [--env-a N=V] [--env-b N=V] \\
        [--arg-a ARG] [--arg-b ARG] [--command analyze|export]
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import compile_bytecode, run_measured, write_json


def one(zym: str, args: argparse.Namespace, out: Path, env: list[str],
        extra: list[str] = ()) -> dict:
    if args.command == "export":  # the trace written to ``out``, the one line to /dev/null
        cmd = [zym, "export", str(args.input), "-o", str(out), "--no-progress", "--force",
               *extra]
        to = "/dev/null"
    else:
        cmd = [zym, "analyze", str(args.input), "--format", "json", "--no-progress", *extra]
        to = str(out)
    if args.no_rules:
        cmd.append("--no-rules" if args.command == "analyze" else "--no-findings")
    shell = " ".join([*(f"'{e}'" for e in env), *(f"'{c}'" for c in cmd)]) + f" > '{to}'"
    if env:
        shell = "env " + shell
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    row = run_measured(["bash", "-c", shell])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds (user + system) of the whole process tree: less sensitive than wall time
    # to other work on a shared machine.
    return row | {"cpu_s": (after.ru_utime + after.ru_stime)
                  - (before.ru_utime + before.ru_stime)}


def spread(values: list[float], fmt: str = ".2f") -> str:
    """Median (min-max)."""
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def summarize(pairs: list[dict]) -> None:
    """Each side's wall, CPU and peak, median (min-max), and B/A per pair: printed."""
    for side in ("a", "b"):
        print(f"{side.upper()}: wall s {spread([p[side]['wall_s'] for p in pairs])}, "
              f"CPU s {spread([p[side]['cpu_s'] for p in pairs])}, "
              f"peak MB {spread([p[side]['tree_mb'] for p in pairs], '.0f')}")
    print(f"B/A wall per pair: {spread([p['b']['wall_s'] / p['a']['wall_s'] for p in pairs])}")
    print(f"B/A CPU per pair: {spread([p['b']['cpu_s'] / p['a']['cpu_s'] for p in pairs])}")
    print(f"B/A peak per pair: {spread([p['b']['tree_mb'] / p['a']['tree_mb'] for p in pairs])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", type=Path)
    parser.add_argument("--a", required=True, help="zym console script of install A (before)")
    parser.add_argument("--b", required=True, help="zym console script of install B (after)")
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--no-rules", action="store_true")
    parser.add_argument("--command", choices=("analyze", "export"), default="analyze",
                        help="export: a Perfetto timeline of INPUT (zym export), not a report")
    parser.add_argument("--json", type=Path, help="write the raw pairs here")
    parser.add_argument("--env-a", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for A's runs (repeatable): e.g. the same "
                             "install with a mechanism off (A) and on (B)")
    parser.add_argument("--env-b", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--arg-a", action="append", default=[], metavar="ARG",
                        help="an argument added to A's command line (repeatable; write "
                             "--arg-b=--memory-budget=1G): the same install asked two ways")
    parser.add_argument("--arg-b", action="append", default=[], metavar="ARG")
    args = parser.parse_args()
    args.input = args.input.resolve()
    for zym in (args.a, args.b):
        compile_bytecode(str(Path(zym).with_name("python")))
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        suffix = ".pftrace" if args.command == "export" else ".json"
        outs = {"a": Path(tmp) / f"a{suffix}", "b": Path(tmp) / f"b{suffix}"}
        for i in range(args.pairs):
            order = ("a", "b") if i % 2 == 0 else ("b", "a")
            pair = {side: one(getattr(args, side), args, outs[side],
                              getattr(args, f"env_{side}"), getattr(args, f"arg_{side}"))
                    for side in order}
            same_bytes = outs["a"].read_bytes() == outs["b"].read_bytes()
            same = (same_bytes if args.command == "export" else
                    json.loads(outs["a"].read_text()) == json.loads(outs["b"].read_text()))
            pairs.append(pair | {"same_report": same, "same_bytes": same_bytes})
            print(f"pair {i + 1}: A {pair['a']['wall_s']:.2f} s ({pair['a']['cpu_s']:.2f} CPU) "
                  f"{pair['a']['tree_mb']:.0f} MB, B {pair['b']['wall_s']:.2f} s "
                  f"({pair['b']['cpu_s']:.2f} CPU) {pair['b']['tree_mb']:.0f} MB, "
                  f"same report: {same}, byte for byte: {same_bytes}", flush=True)

    summarize(pairs)
    print(f"reports the same in {sum(p['same_report'] for p in pairs)}/{len(pairs)} pairs")
    if args.json:
        write_json(args.json, {"input": str(args.input), "a": args.a, "b": args.b,
                               "env_a": args.env_a, "env_b": args.env_b,
                               "arg_a": args.arg_a, "arg_b": args.arg_b,
                               "no_rules": args.no_rules, "command": args.command,
                               "pairs": pairs})


if __name__ == "__main__":
    main()
