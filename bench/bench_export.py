"""Benchmark: `zym export --format perfetto` speed and size, against the Kineto JSON it came from.

The capture is loaded (and analyzed) once, outside the timing; each run then times
``export_perfetto`` alone (building tracks, interning, ordering, encoding and writing), and the
median of --repeat runs is kept. Speed is given two ways:

* capture events/s: rows of the capture exported (CPU spans + CUDA calls + GPU operations);
* trace events/s: what the trace holds (slice begins and ends, instants, counter samples).

    python bench/bench_export.py [--repeat 5] [--synthetic bench/out/synthetic-1m.parquet]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"


def bench(path: Path, repeat: int, kineto_json: Path | None) -> dict:
    from zym.analysis.export.perfetto import export_perfetto
    from zym.analysis.export.source import load_export_source

    t = time.perf_counter()
    try:
        src = load_export_source(path)
    except Exception as e:  # noqa: BLE001 (a rule engine failure must not stop the timing)
        print(f"findings skipped ({type(e).__name__}: {str(e)[:200]})", file=sys.stderr)
        src = load_export_source(path, with_findings=False)
    load_s = time.perf_counter() - t
    capture_events = src.spans.height + src.data.calls.height + src.data.gpu.height
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.pftrace"
        cpu = []
        for _ in range(repeat):
            c0 = time.process_time()
            stats = export_perfetto(src, out)
            cpu.append(time.process_time() - c0)
            runs.append(stats.seconds)
        data = out.read_bytes()
    seconds = statistics.median(runs)
    cpu_s = statistics.median(cpu)
    row = {
        "input": str(path.relative_to(REPO) if path.is_relative_to(REPO) else path),
        "load_and_analyze_s": round(load_s, 3),
        "capture_events": capture_events, "trace_events": stats.events,
        "export_s_median": round(seconds, 4), "export_s_all": [round(r, 4) for r in runs],
        "export_cpu_s_median": round(cpu_s, 4),
        "export_s_best": round(min(runs), 4), "export_cpu_s_best": round(min(cpu), 4),
        "capture_events_per_s_best": round(capture_events / min(runs)),
        "trace_events_per_s_best": round(stats.events / min(runs)),
        "capture_events_per_s": round(capture_events / seconds),
        "capture_events_per_cpu_s": round(capture_events / cpu_s),
        "trace_events_per_s": round(stats.events / seconds),
        "pftrace_bytes": len(data), "pftrace_gzip_bytes": len(gzip.compress(data, 6)),
        "findings": len(src.findings), "spans_reconstructed": src.spans_reconstructed, "overlap_tracks": stats.overlap_tracks,
    }
    if kineto_json is not None:
        raw = gzip.decompress(kineto_json.read_bytes()) if kineto_json.suffix == ".gz" \
            else kineto_json.read_bytes()
        row |= {"kineto_json_bytes": len(raw), "kineto_json_gzip_bytes": kineto_json.stat().st_size
                if kineto_json.suffix == ".gz" else len(gzip.compress(raw, 6)),
                "size_ratio": round(len(data) / len(raw), 4)}
        row["gzip_size_ratio"] = round(row["pftrace_gzip_bytes"] / row["kineto_json_gzip_bytes"],
                                       4)
    row["load_average"] = round(os.getloadavg()[0], 2)
    return row


def tiled_capture(times: int, out: Path) -> Path:
    """The sample repeated ``times`` times back to back (times and correlation ids shifted): a
    large capture with the nesting and stream behaviour of a real one."""
    import polars as pl
    from zym.capture.kineto import load_kineto
    from zym.schemas import write_capture

    tables, meta = load_kineto(SAMPLE)
    timed = [t for t in ("span", "call", "gpu") if t in tables]
    start = min(int(tables[t]["ts_ns"].min()) for t in timed)
    end = max(int((tables[t]["ts_ns"] + tables[t]["dur_ns"]).max()) for t in timed)
    window = end - start + 1_000_000
    corr = int(max(tables[t]["correlation_id"].max() for t in ("call", "gpu"))) + 1
    out_tables = dict(tables)
    for t in timed:
        parts = []
        for i in range(times):
            shift = [pl.col("ts_ns") + i * window]
            if "correlation_id" in tables[t].columns:
                shift.append(pl.col("correlation_id") + i * corr)
            parts.append(tables[t].with_columns(shift))
        out_tables[t] = pl.concat(parts)
    return write_capture(out, out_tables, meta)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--synthetic", type=Path, action="append", default=[],
                    help="also export this zym capture (e.g. from bench/make_synthetic.py)")
    ap.add_argument("--tile", type=int, action="append", default=[],
                    help="also export the sample repeated N times back to back")
    ap.add_argument("--json", type=Path, help="write the results here as JSON")
    a = ap.parse_args()
    rows = [bench(SAMPLE, a.repeat, SAMPLE)]
    with tempfile.TemporaryDirectory() as tmp:
        for n in a.tile:
            capture = tiled_capture(n, Path(tmp) / f"sample-x{n}.parquet")
            rows.append(bench(capture, max(1, a.repeat // 2), None) | {"input": f"sample x{n}"})
    rows += [bench(p, max(1, a.repeat // 2), None) for p in a.synthetic]
    for r in rows:
        print(json.dumps(r), file=sys.stderr)
    print("| input | capture events | trace events | export, median wall (CPU) | best wall "
          "| capture events/s, median (best) | trace events/s, median (best) | .pftrace "
          "| vs Kineto JSON | load avg |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = (f"{100 * r['size_ratio']:.1f}% raw, {100 * r['gzip_size_ratio']:.0f}% gzipped"
                 if "size_ratio" in r else "—")
        print(f"| {r['input']} | {r['capture_events']:,} | {r['trace_events']:,} | "
              f"{r['export_s_median']:.3f} s ({r['export_cpu_s_median']:.3f} s) | "
              f"{r['export_s_best']:.3f} s | "
              f"{r['capture_events_per_s'] / 1e6:.2f} M ({r['capture_events_per_s_best'] / 1e6:.2f} M) | "
              f"{r['trace_events_per_s'] / 1e6:.2f} M ({r['trace_events_per_s_best'] / 1e6:.2f} M) | "
              f"{r['pftrace_bytes'] / 1e6:.1f} MB | "
              f"{ratio} | {r['load_average']} |")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
