"""Benchmark: zym import + analyze against HolisticTraceAnalysis's parse, in one run.

Each job runs in a fresh process (bench/child.py); wall time, the job's own work time (after
its imports) and its peak RSS (VmHWM) are recorded, and the median of --repeat runs is kept.

    python bench/bench_analyze.py --hta-python /path/to/venv-with-hta/bin/python \\
        [--synthetic bench/out/synthetic-10m.parquet]

HTA pins its own pandas/numpy, so it lives in its own virtual environment:
    python3 -m venv /tmp/hta && /tmp/hta/bin/pip install holistictraceanalysis
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"
CHILD = Path(__file__).resolve().parent / "child.py"
PACKAGES = ("analysis", "capture", "cli", "rules", "schemas")


def run_job(python: str, *args: str) -> dict:
    """Run one child job; return wall seconds, its own import/work seconds and peak RSS (MB)."""
    start = time.perf_counter()
    proc = subprocess.run([python, str(CHILD), *args], capture_output=True, cwd=REPO, check=False)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{args[0]} failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
    lines = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith("{")]
    return {"wall_s": wall, **json.loads(lines[-1])}


def median_of(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def hta_trace_dir(tmp: Path) -> Path:
    """HTA reads a folder of per-rank traces and needs a distributedInfo rank."""
    trace = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    trace["distributedInfo"] = {"rank": 0, "world_size": 1, "backend": "nccl"}
    folder = tmp / "hta"
    folder.mkdir()
    with gzip.open(folder / "rank0.json.gz", "wt") as f:
        json.dump(trace, f)
    return folder


def precompile() -> None:
    """Byte-compile zym's sources, as a (non-editable) pip install does: HTA's venv has its
    .pyc files, and PYTHONDONTWRITEBYTECODE would otherwise make each zym run recompile."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(REPO / d) for d in PACKAGES)],
                   check=True)


def measure(args: argparse.Namespace) -> dict[str, dict]:
    precompile()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        parquet = tmp / "sample.parquet"
        jobs: dict[str, tuple[str, ...]] = {
            "zym analyze (Kineto JSON directly)": (sys.executable, "zym_analyze", str(SAMPLE)),
            "zym import (JSON -> Parquet)": (sys.executable, "zym_import", str(SAMPLE), str(parquet)),
            "zym analyze (Parquet)": (sys.executable, "zym_analyze", str(parquet)),
        }
        if args.hta_python:
            jobs["HTA TraceAnalysis parse"] = (args.hta_python, "hta_parse", str(hta_trace_dir(tmp)))
        for _ in range(args.repeat):  # interleaved, so drift in machine load hits all jobs alike
            for name, (python, *job) in jobs.items():
                if name.startswith("zym import"):
                    parquet.unlink(missing_ok=True)
                results.setdefault(name, []).append(run_job(python, *job))
        if args.synthetic:
            results["zym analyze synthetic capture"] = [
                run_job(sys.executable, "zym_analyze", str(args.synthetic))]
    return {name: median_of(runs) for name, runs in results.items()}


def report(res: dict[str, dict], synthetic: Path | None) -> str:
    lines = ["| job | wall (s) | imports (s) | work (s) | peak RSS (MB) |", "|---|---:|---:|---:|---:|"]
    for name, r in res.items():
        lines.append(f"| {name} | {r['wall_s']:.2f} | {r['import_s']:.2f} | {r['work_s']:.2f} "
                     f"| {r['peak_mb']:.0f} |")
    imp, ana = res["zym import (JSON -> Parquet)"], res["zym analyze (Parquet)"]
    direct = res["zym analyze (Kineto JSON directly)"]
    two_step = {"work_s": imp["work_s"] + ana["work_s"], "wall_s": imp["wall_s"] + ana["wall_s"],
                "peak_mb": max(imp["peak_mb"], ana["peak_mb"])}
    lines.append(f"| zym import + analyze (two processes) | {two_step['wall_s']:.2f} | | "
                 f"{two_step['work_s']:.2f} | {two_step['peak_mb']:.0f} |")
    hta = res.get("HTA TraceAnalysis parse")
    if hta:
        lines += ["", "Ratios against HTA's parse, same run (higher is better for zym):", ""]
        for label, ours in (("analyze JSON directly", direct), ("import + analyze", two_step)):
            lines.append(
                f"- {label}: work time {hta['work_s'] / ours['work_s']:.1f}x faster, wall "
                f"{hta['wall_s'] / ours['wall_s']:.1f}x faster, peak memory "
                f"{ours['peak_mb'] / hta['peak_mb']:.2f} of HTA's ({hta['peak_mb'] / ours['peak_mb']:.1f}x less)")
    if synthetic:
        lines += ["", f"Synthetic capture: {synthetic}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hta-python", help="python of a venv with holistictraceanalysis")
    parser.add_argument("--synthetic", type=Path, help="a capture made by make_synthetic.py")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(report(measure(args), args.synthetic))


if __name__ == "__main__":
    main()
