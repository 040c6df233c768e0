"""The rules' incremental replays of one capture, timed alone, in process.

Analyses CAPTURE, runs the 14 built-in rules once while recording every fix replayed from
the unfixed state (each finding's own, and each together with those ranked above it), then
replays those fixes again, twice, timed; prints the outcomes' hash and, with ``--ref FILE``,
whether they equal those saved there (the first run with a given FILE saves them).

    python bench/bench_replay_fixes.py CAPTURE [--ref outcomes.pkl]
"""
from __future__ import annotations

import argparse
import pickle
import time
from pathlib import Path

from zym.analysis import replay as R
from zym.analysis.report import analyze
from zym.rules import evaluate, load_packs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument("--ref", type=Path)
    args = parser.parse_args()
    analysis = analyze(args.capture, lambda _s: None, "steady")
    tl = analysis.timeline
    fixes = []
    replay = R._Base.replay

    def record(self, tl, fix):
        fixes.append(fix)
        return replay(self, tl, fix)

    R._Base.replay = record
    t = time.perf_counter()
    evaluate(analysis, load_packs(()), ())
    print(f"evaluate {time.perf_counter() - t:.2f} s, incremental replays {len(fixes)}")
    R._Base.replay = replay
    for _ in range(2):
        t = time.perf_counter()
        outcomes = [tl.replay(f) for f in fixes]
        dt = time.perf_counter() - t
        print(f"replays {dt:.2f} s ({1000 * dt / len(fixes):.1f} ms each)", flush=True)
    if args.ref is not None:
        if args.ref.exists():
            print("same as reference:", pickle.loads(args.ref.read_bytes()) == outcomes)
        else:
            args.ref.write_bytes(pickle.dumps(outcomes))


if __name__ == "__main__":
    main()
