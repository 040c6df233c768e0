"""Key facts of Kineto traces computed independently of zym, against `zym analyze`.

For each trace: the raw JSON read with the json module (times as exact decimals), the capture
span of CUDA calls and GPU work, GPU busy time per device (union of kernel, copy and memset
intervals), counts of kernels, copies, memsets, calls and cuda_sync records, and the top
three GPU operations by time; then ``zym analyze --format json`` of the same file, and every
fact that differs. Older Kineto category names are mapped as docs/import.md says.

    python bench/check_kineto_facts.py --zym /venv/bin/zym TRACE...
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import subprocess
from decimal import ROUND_HALF_EVEN, Decimal

ALIAS = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel",
         "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}
CALLS = {"cuda_runtime", "cuda_driver"}
WORK = {"kernel", "gpu_memcpy", "gpu_memset"}


def ns(us: object) -> int:
    return int((Decimal(repr(us) if isinstance(us, float) else str(us)) * 1000)
               .to_integral_value(ROUND_HALF_EVEN))


def union(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total, end = total + e - s, e
        elif e > end:
            total, end = total + e - end, e
    return total


def facts(path: str) -> dict | None:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path) as f:
        doc = json.load(f)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    rows = []
    for e in events:
        cat = ALIAS.get(e.get("cat"), e.get("cat"))
        if e.get("ph") == "X" and cat in CALLS | WORK | {"cuda_sync"}:
            start = ns(e["ts"])
            rows.append((cat, e.get("name", ""), e.get("args", {}), start,
                         start + ns(e.get("dur", 0))))
    if not rows:
        return None
    busy, top = collections.defaultdict(list), collections.defaultdict(lambda: [0, 0])
    for cat, name, args, s, e in rows:
        if cat in WORK:
            busy[args.get("device")].append((s, e))
            top[name][0] += e - s
            top[name][1] += 1
    count = collections.Counter(r[0] for r in rows)
    return {"capture_ns": max(r[4] for r in rows) - min(r[3] for r in rows),
            "busy": {d: union(iv) for d, iv in busy.items()},
            "kernels": count["kernel"], "copies": count["gpu_memcpy"],
            "memsets": count["gpu_memset"], "calls": count["cuda_runtime"] + count["cuda_driver"],
            "sync_records": count["cuda_sync"],
            "top": sorted(map(tuple, top.values()), reverse=True)[:3]}


def zym_facts(zym: str, path: str) -> dict | str:
    out = subprocess.run([zym, "analyze", path, "--format", "json", "--no-progress",
                          "--window", "all"],  # whole-trace facts, warm-up included
                         check=False, capture_output=True, text=True)
    if out.returncode:
        return out.stderr.strip()
    z = json.loads(out.stdout)
    c = z["capture"]
    return {"capture_ns": z["phases"]["capture_ns"],
            "busy": {d["device_id"]: d["busy_ns"] for d in z["gpu"]["devices"]},
            "kernels": c["kernels"], "copies": c["copies"], "memsets": c["memsets"],
            "calls": c["calls"], "sync_records": c.get("sync_records", 0),
            "top": [(t["gpu_ns"], t["count"]) for t in z["top_kernels"][:3]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--zym", default="zym")
    args = parser.parse_args()
    for path in args.traces:
        want, got = facts(path), zym_facts(args.zym, path)
        if isinstance(got, str):
            print(f"{path}: zym refused it: {got[:200]}")
        elif want is None:  # (zym refusing the file was handled above)
            print(f"{path}: no CUDA call or GPU work; zym: {got['calls']} calls, "
                  f"{got['kernels'] + got['copies'] + got['memsets']} GPU ops")
        else:
            bad = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
            print(f"{path}: " + ("all facts agree" if not bad else f"DIFFER (zym, raw): {bad}"))


if __name__ == "__main__":
    main()
