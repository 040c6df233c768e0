"""A zym capture repeated N times, one copy after another: a capture of any size from a smaller
one (bench/replicate_trace.py does the same for torch.profiler JSON).

Each copy is shifted past the previous one's end in time (1 µs apart) and its correlation and
op ids past the previous one's; frames and stacks are shared. Read and written a row group at
a time (the capture's own reader and writer), so any number of copies fits in memory.

    python bench/replicate_capture.py IN.parquet N OUT.parquet
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import polars as pl
from zym.schemas.errors import InputError
from zym.schemas.io import CaptureWriter, open_capture

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import fail  # bench/: the script's folder

TIMED = ("span", "range", "call", "gpu")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("input", type=Path)
    p.add_argument("copies", type=int)
    p.add_argument("output", type=Path)
    args = p.parse_args()
    if args.copies < 1:
        fail("N must be at least 1")
    started = time.perf_counter()
    try:
        cap = open_capture(args.input)
        stats = {t: cap.scan(t).select(
            pl.col("ts_ns").min().alias("lo"), (pl.col("ts_ns") + pl.col("dur_ns")).max()
            .alias("hi"), *(pl.col(c).max().alias(c) for c in ("correlation_id", "op_id")
                             if c in cap.scan(t).collect_schema())).collect().row(0, named=True)
                 for t in TIMED}
        lo = min(s["lo"] for s in stats.values() if s["lo"] is not None)
        hi = max(s["hi"] for s in stats.values() if s["hi"] is not None)
        period = hi - lo + 1_000
        ids = {c: 1 + max((s.get(c) or 0) for s in stats.values())
               for c in ("correlation_id", "op_id")}
        with CaptureWriter(args.output, cap.meta) as w:
            for table in ("frame", "stack"):
                w.write(table, cap.scan(table).collect())
            for k in range(args.copies):
                for table in TIMED:
                    for part in cap.parts(table):
                        shifted = [pl.col("ts_ns") + k * period]
                        shifted += [pl.col(c) + k * step for c, step in ids.items()
                                    if c in part.columns]
                        w.write(table, part.with_columns(shifted))
                print(f"copy {k + 1}/{args.copies} ({time.perf_counter() - started:.0f} s)",
                      flush=True)
    except (InputError, OSError) as e:
        fail(str(e))
    print(f"wrote {args.output} ({args.output.stat().st_size / 1e9:.2f} GB) in "
          f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
