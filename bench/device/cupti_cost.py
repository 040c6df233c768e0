"""What each CUPTI configuration costs the target's CPU, measured inside one process.

    ZYM_CUPTI_DIR=DIR PYTHONPATH=capture/cupti/bootstrap:$PYTHONPATH \\
        python3 bench/device/cupti_cost.py WORKLOAD OUT.json [--rounds 9]
    python3 bench/device/cupti_cost.py WORKLOAD OUT.json --plain     # no collector at all

Under zym's CUPTI bootstrap the collector starts at ``import torch``; this script then switches
it, between timed passes of a bench/whatif workload (after a warm-up pass), through these
configurations, in a shuffled order each round:

    off      every activity kind and API record off (CUPTI stays subscribed)
    kernel   kernel records only
    gpu      kernel, copy, memset, sync and internal-launch records (ZYM_CUPTI_ALL_APIS=0)
    anchors  gpu + API records of copies, memsets and syncs (not of launches)
    default  gpu + API records of launches, copies, memsets and syncs (zym capture's default)

One process for all arms, so the pairs share the process, the allocator and the GPU state;
``--plain`` runs the same passes in a process where CUPTI was never loaded, to see whether
``off`` is the uninstrumented speed. OUT.json: seconds per pass, per arm.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "whatif"))

import harness

LAUNCH = re.compile(r"^(cuda|cu)(LaunchKernel|LaunchKernelEx|LaunchKernelExC|"
                    r"LaunchCooperativeKernel|GraphLaunch)")
ARMS = ("off", "kernel", "gpu", "anchors", "default")


def switch(c, agent, arm: str) -> None:
    """Put the live collector ``c`` in configuration ``arm``."""
    kinds = {"off": (), "kernel": (agent.KIND_CONCURRENT_KERNEL,)}.get(arm, agent.ENABLED_KINDS)
    for kind in agent.ENABLED_KINDS:
        (c.lib.cuptiActivityEnable if kind in kinds else c.lib.cuptiActivityDisable)(kind)
    for domain, fn in (("runtime", c.lib.cuptiActivityEnableRuntimeApi),
                       ("driver", c.lib.cuptiActivityEnableDriverApi)):
        for cbid, raw in c.enabled_apis.get(domain, {}).items():
            on = arm == "default" or (arm == "anchors" and not LAUNCH.match(agent.api_name(raw)))
            fn(cbid, int(on))


class Micro:
    """A pass of ``n`` one-element ``add_`` launches: the CPU cost of a launch, nothing else."""

    device, tf32 = "cuda", False

    def __init__(self, n: int) -> None:
        import torch

        self.x = torch.zeros(1, device="cuda")
        self.requests = [n]

    def handle(self, n: int) -> None:
        x = self.x
        for _ in range(n):
            x.add_(1)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("workload")
    p.add_argument("out")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--plain", action="store_true")
    a = p.parse_args()
    if a.workload.startswith("micro"):  # micro:N: N launches of a one-element add_ a pass
        svc = Micro(int(a.workload.partition(":")[2] or 3000))
    else:
        mod = harness.load(a.workload)
        svc = harness.build(mod, "base", "cuda", None)  # imports torch: the collector starts
    agent = sys.modules.get("_zym_cupti_agent")
    c = getattr(agent, "_collector", None)
    if not a.plain and c is None:
        raise SystemExit("cupti_cost: no live collector (run under zym's CUPTI bootstrap)")
    arms = ("plain",) if a.plain else ARMS
    harness.serve(svc, 1)  # warm-up
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    rng = random.Random(0)
    stamps: list[tuple[str, float]] = []
    t0 = time.monotonic()
    for _ in range(a.rounds):
        order = list(arms)
        rng.shuffle(order)
        for arm in order:
            if c is not None:
                switch(c, agent, arm)
            stamps.append((arm, time.time()))
            times[arm].append(harness.timed_pass(svc))
    if c is not None:
        switch(c, agent, "default")
    Path(a.out).write_text(json.dumps({
        "workload": a.workload, "requests_per_pass": len(svc.requests), "rounds": a.rounds,
        "pass_s": times, "started": stamps, "wall_s": time.monotonic() - t0,
        "apis": {d: sorted(m.values()) for d, m in (c.enabled_apis.items() if c else ())}}))
    med = {arm: sorted(ts)[len(ts) // 2] * 1e3 / len(svc.requests) for arm, ts in times.items()}
    print(a.workload, " ".join(f"{arm} {ms:.2f}" for arm, ms in med.items()), "ms/request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
