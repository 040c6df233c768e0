"""The CUPTI agent's stop while its periodic flush runs, on real CUPTI (bench/device/
stop_in_flush.sh runs it): a target started with zym's bootstrap launches N kernels of one
kind (``x.add_(1)``), then stops the agent at a random moment of a 2 ms flush period, as
zym's SIGUSR2 does. The spool must end with the footer and hold all N kernels (counted here
by kernel name from the raw records, with the agent's own walker, not zym's decoder).

    python stop_in_flush.py N            # the target (the bootstrap on PYTHONPATH)
    python stop_in_flush.py --count SPOOL_DIR AGENT_PY
"""
from __future__ import annotations

import importlib.util
import json
import random
import struct
import sys
import time
from collections import Counter
from pathlib import Path


def target(n: int) -> None:
    import torch

    x = torch.zeros(1024, device="cuda")
    torch.cuda.synchronize()
    for _ in range(n):
        x.add_(1)
    torch.cuda.synchronize()
    time.sleep(random.uniform(0.0, 0.004))   # anywhere in a flush period (2 ms)
    sys.modules["_zym_cupti_agent"]._collector.stop("test")
    time.sleep(0.2)   # a flush's buffer handed back after the stop would be written now
    print(json.dumps({"launched": n, "x0": float(x[0])}))


def count(spool_dir: Path, agent_py: Path) -> dict:
    spec = importlib.util.spec_from_file_location("agent_walk", agent_py)
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    (path,) = spool_dir.glob("cupti-*.spool")
    chunks = list(agent.read_chunks(str(path)))
    kinds = [k for k, _, _ in chunks]
    header = json.loads(next(p for k, _, p in chunks if k == "header"))
    names = {}
    for k, _, p in chunks:
        if k == "names":
            names |= {int(a): b for a, b in json.loads(p).items()}
    sizes = agent.RECORD_SIZES[agent.cupti_major(int(header["cupti_api_version"]))]
    q = struct.Struct("<q").unpack_from
    per_name: Counter = Counter()
    after_footer = 0
    seen_footer = False
    for k, _, data in chunks:
        seen_footer |= k == "footer"
        if k != "activity":
            continue
        offsets, rkinds, _ = agent.record_offsets(data, sizes)
        for o, rk in zip(offsets, rkinds):
            if rk == agent.KIND_CONCURRENT_KERNEL:
                per_name[names.get(q(data, o + agent.KERNEL_NAME_OFFSET)[0], "?")] += 1
                after_footer += seen_footer
    adds = sum(v for name, v in per_name.items() if "add" in name.lower())
    return {"footer_last": kinds[-1] == "footer", "add_kernels": adds,
            "kernels": sum(per_name.values()), "after_footer": after_footer,
            "names": dict(per_name.most_common(3))}


if __name__ == "__main__":
    if sys.argv[1] == "--count":
        print(json.dumps(count(Path(sys.argv[2]), Path(sys.argv[3]))))
    else:
        target(int(sys.argv[1]))
