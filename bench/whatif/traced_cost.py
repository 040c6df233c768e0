"""What torch.profiler (CPU + CUDA, with_stack, record_shapes: the harness's trace settings)
adds to one pass of a workload's variant, on the GPU machine: the pass timed plain and traced,
interleaved, and the events of the trace by kind. On a variant whose pass is bound by its CPU
(a GPU fix applied), the difference is the profiler's CPU cost there: the figure zym's
deflation of a torch.profiler trace (``KINETO_NS_PER_EVENT``) should give.

    python bench/whatif/traced_cost.py OUT.json WORKLOAD:VARIANT [WORKLOAD:VARIANT...]
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "workloads"))


def main() -> int:
    from calibrate import plain_and_traced
    from harness import load, serve

    out = {}
    for arg in sys.argv[2:]:
        workload, variant = arg.split(":")
        svc = load(workload).build(variant, "cuda")
        plain, traced, events = plain_and_traced(lambda s=svc: serve(s, 1), 7)
        kinds = {}
        for e in events:
            if e.get("ph") == "X":
                kinds[e.get("cat")] = kinds.get(e.get("cat"), 0) + 1
        out[arg] = {"plain_s": plain, "traced_s": traced, "events": kinds,
                    "requests": len(svc.requests),
                    "extra_s": statistics.median(traced) - statistics.median(plain)}
        print(arg, json.dumps({k: v for k, v in out[arg].items() if k != "events"}),
              kinds, flush=True)
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
