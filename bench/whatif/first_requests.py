"""A torch.profiler trace cut after its first N calls of a function (a request handler), kept
small enough for the repo: the CPU events that end by then, the GPU work their runtime calls
launched (by correlation id, wherever it ran), their flow arrows, and every metadata event.

    python bench/whatif/first_requests.py TRACE.json.gz FUNCTION N OUT.json.gz

(``readback-late_wait.parquet`` in ``results/h100-readback/kineto/``: the ``late_wait``
trace cut after 3 calls of ``handle``, then ``zym import``.)
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}


def fail(message: str) -> None:
    print(f"first_requests: {message}", file=sys.stderr)
    sys.exit(2)


def cut(trace: dict, function: str, n: int) -> dict:
    """``trace`` after its first ``n`` calls of ``function`` (python_function events named
    ``file(line): function``)."""
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        fail("not a torch.profiler trace (no traceEvents list)")
    calls = sorted((e for e in events if e.get("cat") == "python_function"
                    and e.get("name", "").endswith(f": {function}")), key=lambda e: e["ts"])
    if len(calls) < n:
        fail(f"{len(calls)} calls of {function}, fewer than {n}")
    end = calls[n - 1]["ts"] + calls[n - 1]["dur"]
    kept, launched = [], set()
    for e in events:
        if e.get("ph") == "X" and e.get("cat") not in GPU_CATS and e["ts"] + e["dur"] <= end:
            kept.append(e)
            if (c := e.get("args", {}).get("correlation")) is not None:
                launched.add(c)
    for e in events:
        ph = e.get("ph")
        if ph in ("M", "i") or (ph in ("s", "f") and e.get("id") in launched) or (
                ph == "X" and e.get("cat") in GPU_CATS
                and e.get("args", {}).get("correlation") in launched):
            kept.append(e)
    return {**trace, "traceEvents": kept}


def main() -> None:
    if len(sys.argv) != 5 or not sys.argv[3].isdigit() or int(sys.argv[3]) < 1:
        fail("usage: first_requests.py TRACE.json.gz FUNCTION N OUT.json.gz")
    src, function, n, out = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    try:
        with gzip.open(src, "rt") as f:
            trace = json.load(f)
    except (OSError, EOFError, ValueError) as e:
        fail(f"{src}: cannot read ({e})")
    from zym.schemas.errors import ZymError
    from zym.schemas.output import atomic_output

    try:
        with atomic_output(out, force=True) as tmp, gzip.open(tmp, "wt") as f:
            json.dump(cut(trace, function, n), f)
    except ZymError as e:
        fail(str(e))


if __name__ == "__main__":
    main()
