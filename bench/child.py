"""One measured job, run in its own process by bench_analyze.py; prints its timings as JSON.

Times are split into importing the libraries and doing the work, so that a peer whose
imports are heavy is compared fairly both ways. Peak memory is this process's own high-water
mark (VmHWM): the parent's rusage would include what a forked child inherits from it.
"""
from __future__ import annotations

import json
import sys
import time


def zym_analyze(path: str) -> None:
    from zym.analysis import analyze

    analyze(path).to_dict()


def zym_import(path: str, out: str) -> None:
    from zym.capture.kineto import import_kineto

    import_kineto(path, out)


def zym_decode(path: str) -> None:
    """zym's JSON work alone: read, gunzip and decode the events into columns."""
    from pathlib import Path

    from zym.capture.kineto_json import read_events

    read_events(Path(path))


def floor_gunzip(path: str) -> None:
    """The first floor: ISA-L gunzip of the whole file (in pieces, nothing kept)."""
    from isal import isal_zlib

    with open(path, "rb") as f:
        d = isal_zlib.decompressobj(wbits=31)
        while chunk := f.read(1 << 20):
            d.decompress(chunk)
            while d.eof and d.unused_data:  # concatenated members
                rest = d.unused_data
                d = isal_zlib.decompressobj(wbits=31)
                d.decompress(rest)


def floor_split(path: str) -> None:
    """The second floor: gunzip, then split ``traceEvents`` into raw event slices (msgspec
    Raw: one small object per event, no field decoded)."""
    import msgspec
    from isal import igzip

    top = msgspec.defstruct("Top", [("traceEvents", list[msgspec.Raw])])
    with igzip.open(path, "rb") as f:
        text = f.read()
    msgspec.json.decode(text, type=top)


def hta_parse(trace_dir: str) -> None:
    from hta.trace_analysis import TraceAnalysis

    TraceAnalysis(trace_dir=trace_dir)


# What each job imports before its clock starts: the library and its parser, as HTA's
# ``hta.trace_analysis`` brings its own.
IMPORTS = {
    "zym_analyze": ("zym.analysis", "zym.capture.kineto"),
    "zym_import": ("zym.capture.kineto", "zym.schemas.io", "pyarrow.parquet"),
    "hta_parse": ("hta.trace_analysis",),
    "zym_decode": ("zym.capture.kineto_json",),
    "floor_gunzip": ("isal.isal_zlib",),
    "floor_split": ("isal.igzip", "msgspec"),
}


def main() -> None:
    job, *args = sys.argv[1:]
    start = time.perf_counter()
    for module in IMPORTS[job]:
        __import__(module)
    imported = time.perf_counter()
    globals()[job](*args)
    done = time.perf_counter()
    print(json.dumps({"import_s": imported - start, "work_s": done - imported,
                      "peak_mb": peak_rss_mb()}))


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


if __name__ == "__main__":
    main()
