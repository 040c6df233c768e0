"""What zym's dormant agent costs a process that is never profiled (`zym run`), on this machine.

    python bench/agent/dormant_cost.py [--pairs 9] [--seconds 2]

Pairs of fresh processes, in alternating order: the same CPU-bound Python loop (the GIL held,
as a Python service's main thread holds it) started plainly, and started as `zym run` starts it
(zym's bootstrap on PYTHONPATH, ZYM_AGENT=1; ZYM_CUPTI_EAGER=1 so the agent starts at once
rather than at the first CUDA import: this machine has no CUDA framework). Each process counts
loop iterations in a fixed time after a warm-up; the figures are the paired ratios (agent /
plain) of iterations per wall second and per CPU second of the whole process (the agent's
thread included: what it takes, whatever else the machine runs), median and spread.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

IDLE = r"""
import json, sys, time
time.sleep(0.3)
c0, t0 = time.process_time(), time.perf_counter()
time.sleep(float(sys.argv[1]))
print(json.dumps({"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0}))
"""

LOOP = r"""
import json, sys, time
def work(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s
t_end = time.perf_counter() + 0.3
while time.perf_counter() < t_end:  # warm-up
    work(10_000)
n, t0, c0 = 0, time.perf_counter(), time.process_time()
t_end = t0 + float(sys.argv[1])
while time.perf_counter() < t_end:
    work(10_000)
    n += 1
print(json.dumps({"rate": n / (time.perf_counter() - t0),
                  "cpu_rate": n / (time.process_time() - c0)}))
"""


def run(seconds: float, agent: bool, agent_dir: str, code: str = LOOP) -> dict:
    from zym.capture.cupti import agent_env

    env = agent_env(agent_dir=agent_dir) | {"ZYM_CUPTI_EAGER": "1"} if agent else dict(os.environ)
    out = subprocess.run([sys.executable, "-c", code, str(seconds)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=9)
    p.add_argument("--seconds", type=float, default=2.0)
    a = p.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory() as d:
        # the agent's own CPU: an idle process (its main thread asleep), with and without it
        idle = {agent: [run(a.seconds, agent, d, IDLE) for _ in range(3)] for agent in (False, True)}
        for agent, runs in idle.items():
            us = statistics.median(r["cpu_s"] / r["wall_s"] * 1e6 for r in runs)
            print(f"idle process {'with the dormant agent' if agent else 'plain'}: "
                  f"{us:.0f} µs of CPU a second (median of 3)")
        for i in range(a.pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {agent: run(a.seconds, agent, d) for agent in order}
            ratios.append({k: got[True][k] / got[False][k] for k in ("rate", "cpu_rate")})
            print(f"pair {i + 1}: wall ratio {ratios[-1]['rate']:.4f}, CPU ratio "
                  f"{ratios[-1]['cpu_rate']:.4f}", flush=True)
    cpu = "per CPU second of the process (the agent's thread included)"
    for k, what in (("rate", "per wall second"), ("cpu_rate", cpu)):
        r = [x[k] for x in ratios]
        q = statistics.quantiles(r, n=4)
        print(f"agent / plain, iterations {what}: median {statistics.median(r):.4f} "
              f"(p25 {q[0]:.4f}, p75 {q[2]:.4f}, min {min(r):.4f}, max {max(r):.4f}), "
              f"{a.pairs} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
