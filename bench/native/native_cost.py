"""What native frames cost the probes, on this machine: `zym capture` (the CLI as users run it)
of a workload calling the CUDA stand-ins through a C++ library built like torch
(tests/ebpf/faketorch.cpp: no frame pointers, two operators under one Python line), with and
without --no-native, alternated in pairs.

    python3 bench/native/native_cost.py [--pairs 7] [--iters 20000] [--json OUT]

Per capture: the BPF programs' run time per call (the kernel's own statistics:
extra.capture_cost.bpf_ns_per_call; the native key and the stack copies of new paths are in
zym_native's share), the collector's CPU per call, and the target's wall time. Needs root,
BCC, gcc and g++.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = '''
import ctypes, os, sys, time
lib = ctypes.CDLL(os.path.join(sys.argv[1], "libfaketorch.so"))
time.sleep(0.5)
t = time.perf_counter()
for i in range(int(sys.argv[2])):
    lib.faketorch_linear_relu(i)
    lib.faketorch_add(i)
print(time.perf_counter() - t)
'''


def build(d: Path) -> None:
    ebpf = REPO / "tests" / "ebpf"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(d / "libcuda.so.1"),
                    str(ebpf / "fakecuda.c")], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(d / "libcudart.so.12"),
                    str(ebpf / "fakecudart.c"), str(d / "libcuda.so.1"), "-Wl,-rpath,$ORIGIN"],
                   check=True)
    subprocess.run(["g++", "-shared", "-fPIC", "-O2", "-fomit-frame-pointer", "-o",
                    str(d / "libfaketorch.so"), str(ebpf / "faketorch.cpp"),
                    str(d / "libcudart.so.12"), "-Wl,-rpath,$ORIGIN"], check=True)
    (d / "w.py").write_text(WORKLOAD)


def one(d: Path, native: bool, iters: int) -> dict:
    out = d / ("n.parquet" if native else "p.parquet")
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "zym.cli.main", "capture", "-o", str(out),
                        "--force", *([] if native else ["--no-native"]), "--", sys.executable,
                        str(d / "w.py"), str(d), str(iters)], capture_output=True, text=True,
                       check=False)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(r.stderr[-2000:])
    loop_s = float(r.stdout.strip().splitlines()[-1])
    from zym.schemas import open_capture

    cost = open_capture(out).meta.extra["capture_cost"]
    return {"native": native, "bpf_ns_per_call": cost["bpf_ns_per_call"],
            "consumer_ns_per_call": cost["consumer_cpu_ns_per_call"],
            "target_loop_s": loop_s, "zym_wall_s": wall}


def summary(rows: list[dict], key: str) -> dict:
    a = [r[key] for r in rows if r["native"]]
    b = [r[key] for r in rows if not r["native"]]
    ratio = [x / y for x, y in zip(a, b)]
    return {"native_median": statistics.median(a), "without_median": statistics.median(b),
            "pair_ratio_median": statistics.median(ratio),
            "pair_ratio_range": [min(ratio), max(ratio)]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--json")
    a = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="zym-native-cost-"))
    build(d)
    rows = []
    for i in range(a.pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        for native in order:
            rows.append(one(d, native, a.iters))
            print(json.dumps(rows[-1]), file=sys.stderr)
    res = {"pairs": a.pairs, "calls_per_run": 3 * a.iters,
           **{k: summary(rows, k) for k in ("bpf_ns_per_call", "consumer_ns_per_call",
                                             "target_loop_s")}, "runs": rows}
    print(json.dumps(res, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
