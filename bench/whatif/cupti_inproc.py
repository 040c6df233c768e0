"""What zym's CUPTI collector costs a request, in one process: the workload is started as
`zym capture` starts its target (the bootstrap on PYTHONPATH, ZYM_CUPTI_DIR set: the collector
starts with torch), warmed up, then timed passes rotate between three states of the same
collector, in rounds:

* ``on``: as a capture runs (activity kinds and the launch/copy/memset/sync API records);
* ``no_api``: the API records off (``_set_apis(0)``), the activity kinds still on;
* ``off``: everything off (``pause()``): what is left is CUPTI being loaded and subscribed.

    PYTHONPATH=capture/cupti/bootstrap ZYM_CUPTI_DIR=/tmp/s \
        python3 bench/whatif/cupti_inproc.py WORKLOAD OUT.json [--rounds R]

Each round times one pass per state, the states' order rotated round to round; OUT.json holds
every pass's seconds per state and the requests per pass. Needs a CUDA GPU (the H200).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import build, load, serve, timed_pass


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("workload")
    p.add_argument("out", type=Path)
    p.add_argument("--rounds", type=int, default=15)
    a = p.parse_args()
    svc = build(load(a.workload), "base", "cuda", None)
    serve(svc, 1)  # warm-up (torch imported: the collector has started)
    agent = sys.modules.get("_zym_cupti_agent")
    c = getattr(agent, "_collector", None)
    if c is None:
        print("zym: the CUPTI collector is not running (start with the bootstrap)", file=sys.stderr)
        return 2
    states = {
        "on": lambda: (c.resume(),),
        "no_api": lambda: (c.resume(), c._set_apis(0)),
        "off": lambda: (c.pause(),),
    }
    names = list(states)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(a.rounds):
        for k in range(len(names)):
            n = names[(k + r) % len(names)]
            states[n]()
            serve(svc, 1)  # one untimed pass in the new state: CUPTI settles
            times[n].append(timed_pass(svc))
    c.resume()
    out = {"workload": a.workload, "rounds": a.rounds, "requests_per_pass": len(svc.requests),
           "pass_s": times, "median_ms": {n: round(statistics.median(t) * 1e3, 3)
                                          for n, t in times.items()},
           "stats": {k: v for k, v in c.stats.items() if k != "errors"}}
    a.out.write_text(json.dumps(out, indent=1))
    print(a.workload, out["median_ms"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
