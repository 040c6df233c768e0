"""Benchmark: `zym diff` on two copies of the bundled sample trace (53 MB of Kineto JSON each),
as users run it (the ``zym`` console script), against `zym analyze` of one copy and the
interpreter's own floors, in the same rounds; optionally two installs side by side (A/B).

Jobs, each a fresh process, interleaved round by round in a rotating order (the machine is
shared and noisy), for each install given (``--zym``, repeatable; default: the ``zym`` beside
this python):

* ``diff``: ``zym diff A B --format json --no-progress`` (the default: B analyzed in this
  process while A is analyzed in a forked child; rules on): whole process, imports included;
* ``diff -j1``: the same, one capture after the other (``--with-j1``);
* ``analyze``: ``zym analyze A --format json --no-progress`` (rules on): one capture, the floor
  a diff of two stands on;
* ``start``: ``zym analyze NO-SUCH-FILE.parquet --no-progress`` (exit 2): everything an analysis
  does before it reads its input (interpreter, imports, the rule packs), then the error;

and, with the first install's python: ``python -c pass`` (the interpreter's start),
``python -c "import polars, numpy"`` (the libraries every analysis needs: the floor of any
`zym analyze` or `zym diff`) and the same import as the console script makes it (one OpenBLAS
thread, no GC passes: cli/fast.py; with the last install's python). Each job's CPU seconds (user + system, its whole process
tree) are reported beside its wall time. In process: ``compare``, the comparison alone of two profiles
already built (:func:`zym.analysis.diff.compare`), median of 20 runs.

Before the rounds, each job runs once (warming the page cache and byte-compiled modules) and
the installs' reports are checked to be the same (every key of the JSON, the source paths
aside: both read the same two files). Wall times are ``time.perf_counter`` around the process;
reported: median (min-max) over the rounds, and each install's diff / analyze and B / A per
round.

    python bench/bench_diff.py [--zym /venv-main/bin/zym --zym /venv-branch/bin/zym]
        [--rounds 7] [--with-j1] [--before A --after B] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"


def wall(cmd: list[str], out: Path | None = None, code: int = 0) -> tuple[float, float]:
    """Wall seconds of the process, and the CPU seconds (user + system) of its tree."""
    with open(out or "/dev/null", "wb") as sink:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        done = subprocess.run(cmd, check=False, stdout=sink, stderr=subprocess.DEVNULL)
        took = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != code:
        raise SystemExit(f"{cmd}: exit {done.returncode}, not {code}")
    return took, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def compare_only(python: str, a: Path, b: Path, runs: int = 20) -> list[float]:
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
    res = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(res.stdout)


def spread(values: list[float], digits: int = 3) -> dict:
    return {"median": round(statistics.median(values), digits),
            "min": round(min(values), digits), "max": round(max(values), digits)}


def python_of(zym: str) -> str:
    """The interpreter of a console script (its shebang)."""
    first = Path(zym).read_text().splitlines()[0]
    return first[2:].strip() if first.startswith("#!") else sys.executable


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zym", action="append", help="a zym console script (repeatable: A, B)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--with-j1", action="store_true", help="also `zym diff --jobs 1`")
    ap.add_argument("--before", type=Path, help="compare this capture (default: a copy of the "
                    "sample trace)...")
    ap.add_argument("--after", type=Path, help="...with this one (default: another copy)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    installs = args.zym or [str(Path(sys.executable).with_name("zym"))]
    labels = ["A", "B", "C", "D"][:len(installs)] if len(installs) > 1 else [""]
    python = python_of(installs[0])
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a.trace.json.gz", Path(tmp) / "b.trace.json.gz"
        if args.before and args.after:
            a, b = args.before.resolve(), args.after.resolve()
        else:
            shutil.copy(SAMPLE, a)
            shutil.copy(SAMPLE, b)
        jobs: dict[str, list[str]] = {}
        for label, zym in zip(labels, installs):
            tag = f"{label} " if label else ""
            jobs[f"{tag}diff"] = [zym, "diff", str(a), str(b), "--format", "json",
                                  "--no-progress"]
            if args.with_j1:
                jobs[f"{tag}diff -j1"] = jobs[f"{tag}diff"] + ["--jobs", "1"]
            jobs[f"{tag}analyze"] = [zym, "analyze", str(a), "--format", "json",
                                     "--no-progress"]
            jobs[f"{tag}start"] = [zym, "analyze", str(Path(tmp) / "no-such-file.parquet"),
                                   "--no-progress"]
        jobs["python -c pass"] = [python, "-c", "pass"]
        jobs["python -c 'import polars, numpy'"] = [python, "-c", "import polars, numpy"]
        jobs["numpy, polars as zym imports them"] = [  # one BLAS thread, no GC passes
            python_of(installs[-1]), "-c", "from zym.cli.fast import _import_libraries; _import_libraries()"]
        reports: dict[str, object] = {}
        for name, cmd in jobs.items():  # warm the page cache and the byte-compiled modules
            out = Path(tmp) / "out.json"
            wall(cmd, out, 2 if name.endswith("start") else 0)
            if name.endswith(("diff", "analyze")):
                reports[name] = json.loads(out.read_text())
        same = {kind: all(reports[f"{x} {kind}".strip()] == reports[f"{labels[0]} {kind}"
                                                                    .strip()] for x in labels)
                for kind in ("diff", "analyze")}
        times: dict[str, list[float]] = {k: [] for k in jobs}
        cpu: dict[str, list[float]] = {k: [] for k in jobs}
        names = list(jobs)
        for r in range(args.rounds):
            shift = r % len(names)
            for k in names[shift:] + names[:shift]:
                took, used = wall(jobs[k], code=2 if k.endswith("start") else 0)
                times[k].append(took)
                cpu[k].append(used)
            print(f"round {r + 1}: " + ", ".join(f"{k} {times[k][-1]:.2f}" for k in names),
                  file=sys.stderr, flush=True)
        cmp_s = compare_only(python_of(installs[-1]), a, b)
    out: dict = {"installs": dict(zip(labels, installs)), "inputs": [str(a), str(b)],
                 "reports_same": same}
    out |= {k: spread(v) | {"runs": [round(x, 3) for x in v]} for k, v in times.items()}
    out |= {f"{k} (CPU s, user + system)": spread(v) for k, v in cpu.items()}
    out["compare (in process)"] = spread(cmp_s, 4)
    for label in labels:
        tag = f"{label} " if label else ""
        out[f"{tag}diff / analyze, same round"] = spread(
            [d / an for d, an in zip(times[f"{tag}diff"], times[f"{tag}analyze"])], 2)
    if len(labels) > 1:
        for kind in ("diff", "analyze", "start"):
            out[f"B/A {kind}, same round"] = spread(
                [y / x for x, y in zip(times[f"A {kind}"], times[f"B {kind}"])], 2)
    floor = times["python -c 'import polars, numpy'"]
    bare = times["python -c pass"]
    lean = times["numpy, polars as zym imports them"]
    for k in jobs:
        if k.endswith("start"):
            out[f"{k} above bare Python, same round"] = spread(
                [t - f for t, f in zip(times[k], bare)])
            out[f"{k} above numpy, polars as zym imports them, same round"] = spread(
                [t - f for t, f in zip(times[k], lean)])
        if k.endswith(("diff", "analyze", "start")):
            out[f"{k} above the import floor, same round"] = spread(
                [t - f for t, f in zip(times[k], floor)])
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
