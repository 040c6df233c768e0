"""Make a large torch.profiler trace by repeating a real one N times, one copy after another.

Each copy's times are shifted past the previous copy's end, and its Python ids, External ids
and correlation ids past the previous copy's, so the result is one longer run of the same
program (N times the events, the same call paths and findings, N times the step count). The
text is laid out as Kineto writes it (one event per block), written as it is made (gzip when
OUT ends in .gz), so N is limited by disk, not memory.

    python bench/replicate_trace.py sample_traces/gpt_decode_server.trace.json.gz 40 \\
        -o bench/out/gpt_x40.json.gz
"""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import msgspec
from isal import igzip

ID_ARGS = ("Python id", "Python parent id", "External id", "correlation")


def replicate(src: Path, copies: int, out: Path, rank: int | None = None) -> int:
    """Write ``copies`` copies of ``src``'s events to ``out``; returns the bytes of JSON.
    ``rank``: a ``distributedInfo`` naming it (HolisticTraceAnalysis needs one)."""
    trace = json.loads(gzip.decompress(src.read_bytes()) if src.suffix == ".gz"
                       else src.read_bytes())
    if rank is not None:
        trace["distributedInfo"] = {"rank": rank, "world_size": 1, "backend": "nccl"}
    events = trace.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000.0
    top_id = {k: max((e.get("args", {}).get(k) or 0 for e in events), default=0) + 1
              for k in ID_ARGS}
    top_id["Python parent id"] = top_id["Python id"]  # a parent is a Python id
    flow_id = max((e.get("id") or 0 for e in events if isinstance(e.get("id"), int)), default=0) + 1
    header = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in trace.items())
    opener = igzip.open if out.suffix == ".gz" else open
    written = 0
    with opener(out, "wb") as f:
        def put(text: bytes) -> None:
            nonlocal written
            written += len(text)
            f.write(text)

        put(("{\n" + header + ',\n  "traceEvents": [').encode())
        first = True
        for k in range(copies):
            batch = []
            for e in events:
                if k and isinstance(e.get("ts"), (int, float)):
                    e = dict(e, ts=round(e["ts"] + k * span, 3))
                    args = e.get("args")
                    if args and any(args.get(a) is not None for a in ID_ARGS):
                        e["args"] = {a: (v + k * top_id[a] if a in top_id and isinstance(v, int)
                                         else v) for a, v in args.items()}
                    if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int):
                        e["id"] += k * flow_id
                batch.append(b"\n  {\n    " + msgspec.json.encode(e)[1:-1] + b"\n  }")
            put((b"" if first else b",") + b",".join(batch))
            first = False
        put(b"\n  ]\n}")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("copies", type=int)
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--rank", type=int, help="add a distributedInfo with this rank")
    args = parser.parse_args()
    size = replicate(args.trace, args.copies, args.output, args.rank)
    print(f"wrote {args.output}: {size / 1e9:.2f} GB of JSON, "
          f"{args.output.stat().st_size / 1e6:.0f} MB on disk")


if __name__ == "__main__":
    main()
