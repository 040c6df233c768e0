"""What a blind round's equivalence check does, whatever its workloads: every variant of each
workload against its baseline on the same request (the client sees the same results), each
run as the harness runs it (``harness.active``: inference mode, TF32 where the variant turns
it on), one line per variant from the round's comparator. On the CPU the workloads' smaller
sizes are used (WHATIF_SMALL=1, unless set otherwise): the same code paths, in seconds rather
than minutes. Needs torch.

A round's script (``blindN_equiv.py``) holds its comparators and calls :func:`main`.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "workloads"))


def run(mod, variant: str, device: str):
    """``variant`` of workload module ``mod`` built on ``device``: its answer to the first
    request, after a warm-up on the same request."""
    from harness import active

    svc = mod.build(variant, device)
    with active(svc):
        svc.handle(svc.requests[0])  # warm-up
        return svc.handle(svc.requests[0])


def main(compare: dict[str, Callable], doc: str | None = None) -> int:
    """``compare``: per workload (a module of ``workloads/``), what says how a variant's answer
    differs from the baseline's (``cmp(base, other) -> str``)."""
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", default="", choices=["", *compare])
    a = p.parse_args()
    if a.device == "cpu":
        os.environ.setdefault("WHATIF_SMALL", "1")
    width = max(map(len, compare))
    for name, cmp in compare.items():
        if a.only and name != a.only:
            continue
        mod = importlib.import_module(name)   # after WHATIF_SMALL: it sets the sizes
        base = run(mod, "base", a.device)
        for v in mod.VARIANTS:
            if v != "base":
                print(f"{name:{width}s} {v:15s} {cmp(base, run(mod, v, a.device))}", flush=True)
    return 0
