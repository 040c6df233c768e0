"""Benchmark: `zym diff` on two copies of the bundled sample trace (53 MB of Kineto JSON each),
as users run it, against `zym analyze` of one copy in the same rounds.

Jobs, each a fresh process, interleaved round by round (the machine is shared and noisy):

* ``diff``: ``zym diff A B --format json`` (the default: B analyzed here while A is analyzed in
  a forked child; rules on): whole process, imports included;
* ``diff -j1``: the same, one capture after the other;
* ``analyze``: ``zym analyze A --format json`` (rules on): the floor a diff of two captures
  stands on (two of these, or one when they run at once);
* ``compare``: in process, the comparison alone of two profiles already built
  (:func:`zym.analysis.diff.compare`), median of 20 runs.

Wall times are ``time.perf_counter`` around the process; median and range over the rounds.

    python bench/bench_diff.py [--rounds 7] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"


def wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def compare_only(a: Path, b: Path, runs: int = 20) -> list[float]:
    code = f"""
import time, json
from zym.analysis.export.diff import load_profile
from zym.analysis.diff import compare
pa, pb = load_profile({str(a)!r}), load_profile({str(b)!r})
out = []
for _ in range({runs}):
    t = time.perf_counter(); compare(pa, pb).to_dict(); out.append(time.perf_counter() - t)
print(json.dumps(out))
"""
    res = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(res.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    zym = [sys.executable, "-m", "zym.cli.main"]
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a.trace.json.gz", Path(tmp) / "b.trace.json.gz"
        shutil.copy(SAMPLE, a)
        shutil.copy(SAMPLE, b)
        jobs = {
            "diff": zym + ["diff", str(a), str(b), "--format", "json", "--no-progress"],
            "diff -j1": zym + ["diff", str(a), str(b), "--format", "json", "--no-progress",
                               "--jobs", "1"],
            "analyze": zym + ["analyze", str(a), "--format", "json", "--no-progress"],
        }
        for cmd in jobs.values():  # warm the page cache and the byte-compiled modules
            wall(cmd)
        times: dict[str, list[float]] = {k: [] for k in jobs}
        for r in range(args.rounds):
            order = list(jobs) if r % 2 == 0 else list(reversed(jobs))
            for k in order:
                times[k].append(wall(jobs[k]))
        cmp_s = compare_only(a, b)
    out = {k: {"median_s": round(statistics.median(v), 3), "min_s": round(min(v), 3),
               "max_s": round(max(v), 3), "runs": [round(x, 3) for x in v]}
           for k, v in times.items()}
    out["compare"] = {"median_s": round(statistics.median(cmp_s), 4),
                      "min_s": round(min(cmp_s), 4), "max_s": round(max(cmp_s), 4)}
    ratio = [d / an for d, an in zip(times["diff"], times["analyze"])]
    out["diff_over_analyze"] = {"median": round(statistics.median(ratio), 2),
                                "min": round(min(ratio), 2), "max": round(max(ratio), 2)}
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
