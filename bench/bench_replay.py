"""The what-if replay, incremental against whole, in process: the time of the rules (every
finding's replays: its own saving and its share with those ranked above it) on one capture.

Each round runs two fresh processes, in alternating order: one with the incremental replay
(the default), one with every replay whole (``Timeline.replay(..., incremental=False)``).
Each process analyses the capture (not timed), then times ``evaluate`` (the rules, their fix
models and replays) and checks that both reports are the same.

    python bench/bench_replay.py CAPTURE [--rounds 7] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
from zym.analysis import replay as R
from zym.analysis.report import analyze
from zym.analysis.export.summary import build_report
from zym.rules import evaluate, load_packs
if sys.argv[2] == "whole":
    whole = R.Timeline.replay
    R.Timeline.replay = lambda self, fix, deflate=True, incremental=True, **_: whole(
        self, fix, deflate, False)
a = analyze(sys.argv[1], lambda _s: None, "steady")
packs = load_packs(())
t = time.perf_counter()
findings = evaluate(a, packs, ())
rules_s = time.perf_counter() - t
json.dump(build_report(a, findings, None, 5, None), open(sys.argv[3], "w"), default=str)
print(json.dumps({"rules_s": rules_s, "findings": len(findings)}))
"""


def one(capture: Path, mode: str, out: Path) -> dict:
    res = subprocess.run([sys.executable, "-c", CHILD, str(capture), mode, str(out)],
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            order = ("incremental", "whole") if i % 2 == 0 else ("whole", "incremental")
            r = {m: one(args.capture, m, Path(tmp) / f"{m}.json") for m in order}
            same = (Path(tmp) / "incremental.json").read_text() == \
                (Path(tmp) / "whole.json").read_text()
            r["same_report"] = same
            rows.append(r)
            print(f"round {i + 1}: incremental {r['incremental']['rules_s']:.2f} s, whole "
                  f"{r['whole']['rules_s']:.2f} s, findings {r['whole']['findings']}, "
                  f"same report: {same}", flush=True)

    def med(xs):
        return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"
    inc = [r["incremental"]["rules_s"] for r in rows]
    whole = [r["whole"]["rules_s"] for r in rows]
    print(f"rules, incremental: {med(inc)} s; whole: {med(whole)} s; "
          f"ratio per round: {med([a / b for a, b in zip(inc, whole)])}; "
          f"same report {sum(r['same_report'] for r in rows)}/{len(rows)}")
    if args.json:
        args.json.write_text(json.dumps({"capture": str(args.capture), "rounds": rows}, indent=1))


if __name__ == "__main__":
    main()
