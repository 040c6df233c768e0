"""What `zym capture --rotate` (both sides: eBPF + CUPTI, each interval file with its GPU
records) costs beside one capture of the same run: interleaved pairs, as users run it.

Each pair runs the stand-in service (bench/rotate/workload.py: stand-in libcuda and libcupti,
built here; two threads, ~1,000 CUDA calls/s for SECONDS) under ``zym capture -o one.parquet``
(A) and ``zym capture --rotate INTERVAL -o rot.parquet`` (B), in alternating order. Per run:
wall time of the zym process; CPU seconds of zym itself (the whole process tree's, from
``wait4``, less what the service reports for itself); max RSS (``wait4``: the larger of zym's
and the service's); and for B, the files written, and the kernels in them against the
launches the service counted (every one must be in exactly one file).

    sudo python bench/rotate/cost.py [--pairs 7] [--seconds 10] [--interval 2s] [--json out]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def build(d: Path) -> dict[str, str]:
    cc = shutil.which("gcc") or shutil.which("cc")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(d / "libcuda.so.1"),
                    str(REPO / "tests/ebpf/fakecuda.c")], check=True)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(d / "libcupti.so.13"),
                    str(REPO / "tests/cupti/fakecupti.c"), "-lpthread"], check=True)
    return {"FAKECUDA": str(d / "libcuda.so.1"), "ZYM_CUPTI_LIB": str(d / "libcupti.so.13"),
            "ZYM_CUPTI_EAGER": "1"}


def run(arm: str, d: Path, env: dict, args) -> dict:
    for p in d.glob("out*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    out = d / "out.parquet"
    cmd = [sys.executable, "-m", "zym.cli.main", "capture", "-o", str(out)]
    if arm == "B":
        cmd += ["--rotate", args.interval]
    cmd += ["--", sys.executable, str(HERE / "workload.py")]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    _, status, use = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    stdout, stderr = proc.stdout.read(), proc.stderr.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{arm}: zym exited {proc.returncode}: {stderr[-2000:]}")
    service = json.loads(stdout.strip().splitlines()[-1])
    tree_cpu = use.ru_utime + use.ru_stime
    row = {"arm": arm, "wall_s": round(wall, 3), "zym_cpu_s": round(tree_cpu - service["cpu_s"], 3),
           "service_cpu_s": round(service["cpu_s"], 3), "max_rss_mb": round(use.ru_maxrss / 1024, 1),
           "launches": service["launches"], "syncs": service["syncs"]}
    files = sorted(d.glob("out-*.parquet")) if arm == "B" else [out]
    row |= kernels_in(files)
    return row


def kernels_in(files: list[Path]) -> dict:
    import polars as pl

    kernels, ids, with_calls = 0, set(), 0
    for f in files:
        gpu = pl.read_parquet(f).filter(pl.col("record") == "gpu")
        k = gpu.filter(pl.col("kind") == "kernel")
        kernels += k.height
        ids |= set(zip(k["pid"].to_list(), k["correlation_id"].to_list()))
        with_calls += int(k.height > 0)
    return {"files": len(files), "files_with_kernels": with_calls, "kernels": kernels,
            "kernel_ids_unique": len(ids)}


def summary(rows: list[dict], key: str) -> dict:
    vals = [r[key] for r in rows]
    return {"median": round(statistics.median(vals), 3), "min": min(vals), "max": max(vals)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--interval", default="2s")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="zym-rotate-cost-"))
    env = {**os.environ, **build(d), "SECONDS": str(args.seconds)}
    rows = []
    for i in range(args.pairs):
        for arm in (("A", "B") if i % 2 == 0 else ("B", "A")):
            rows.append(run(arm, d, env, args) | {"pair": i})
            print(json.dumps(rows[-1]), flush=True)
    a = [r for r in rows if r["arm"] == "A"]
    b = [r for r in rows if r["arm"] == "B"]
    ratio = [rb["zym_cpu_s"] / ra["zym_cpu_s"] for ra, rb in zip(a, b)]
    result = {"pairs": args.pairs, "seconds": args.seconds, "interval": args.interval,
              "A_one_file": {k: summary(a, k) for k in ("wall_s", "zym_cpu_s", "max_rss_mb")},
              "B_rotate": {k: summary(b, k) for k in ("wall_s", "zym_cpu_s", "max_rss_mb")},
              "zym_cpu_B_over_A": {"median": round(statistics.median(ratio), 3),
                                   "min": round(min(ratio), 3), "max": round(max(ratio), 3)},
              "every_kernel_once": all(r["kernels"] == r["launches"] == r["kernel_ids_unique"]
                                       for r in rows),
              "rows": rows}
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
