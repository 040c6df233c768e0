"""What finding NVTX marker names costs the target, per completed CUPTI buffer (the agent does it
in CUPTI's completion callback, while the program runs).

    python bench/nvtx/marker_scan.py [--launches 60000] [--repeat 7]

Builds a buffer as CUPTI fills one on a launch-heavy workload (per launch a runtime API record
and a kernel record; with markers: a range start every 4 launches, ~16 MB for 60,000 launches)
and times, median and spread of ``--repeat`` runs: the agent's two scans (numpy, used when the
target has imported it; the regex scan otherwise), with and without markers in the buffer, and
for scale the record-by-record walk (the kernel-name pass the agent makes once, at stop).
In-process figures of one function each, on whatever machine runs it.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "cupti"))
from cupti_builder import api, kernel
from zym.capture.cupti import agent
from zym.capture.cupti.layouts import MARKER_2


def buffers(launches: int) -> tuple[bytes, bytes]:
    with_markers, plain = [], []
    base = 10**15
    for i in range(launches):
        recs = [api(base + 1000 * i, base + 1000 * i + 500, 5, i + 1, 211),
                kernel(base + 1000 * i + 600, base + 1000 * i + 900, i + 1)]
        plain += recs
        with_markers += recs
        if i % 4 == 0:
            m = np.zeros(1, MARKER_2)
            m["kind"], m["flags"], m["id"], m["object_kind"] = agent.KIND_MARKER, 2, i + 1, 2
            m["timestamp"], m["name"] = base + 1000 * i, 0x10000 + i
            with_markers.append(m.tobytes())
    return b"".join(with_markers), b"".join(plain)


def timed(fn, repeat: int) -> str:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t0) * 1e3)
    return f"median {statistics.median(runs):.1f} ms (min {min(runs):.1f}, max {max(runs):.1f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=60_000)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    marked, plain = buffers(a.launches)
    sizes = agent.RECORD_SIZES[13]
    print(f"buffer: {len(marked) / 1e6:.1f} MB, {2 * a.launches + (a.launches + 3) // 4} records "
          f"({(a.launches + 3) // 4} markers); without markers {len(plain) / 1e6:.1f} MB")
    for label, buf in (("with markers", marked), ("without markers", plain)):
        print(f"numpy scan, {label}: {timed(lambda b=buf: agent._pointers_numpy(np, b), a.repeat)}")
        print(f"regex scan, {label}: {timed(lambda b=buf: agent._pointers_scan(b), a.repeat)}")
    print(f"record walk, with markers: {timed(lambda: agent.record_offsets(marked, sizes), a.repeat)}")


if __name__ == "__main__":
    main()
