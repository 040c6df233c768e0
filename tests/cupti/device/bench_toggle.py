"""Overhead of the CUPTI collector inside one process (device only): the gpt_decode_server
workload in groups of 3 batches, recording paused and resumed in ABBA order, so process-level
noise (GPU clocks, allocator state, host load) hits both arms alike.

    PYTHONPATH=capture/cupti/bootstrap ZYM_CUPTI_DIR=/tmp/t python3 tests/cupti/device/bench_toggle.py
"""
import json
import statistics
import sys

sys.path.insert(0, "sample_traces")
import gpt_decode_server as g
import torch

c = sys.modules["_zym_cupti_agent"]._collector
torch.manual_seed(0)
model = g.build_model("cuda")
batches = g.make_batches(3)
g.serve(model, batches[:2], "cuda")
times = {"on": [], "off": []}
for i in range(64):
    mode = "on" if i % 4 in (1, 2) else "off"
    c.resume() if mode == "on" else c.pause()
    times[mode].append(g.serve(model, batches, "cuda") * 1e3)
c.resume()
out = {m: {"groups": len(v), "median_ms": statistics.median(v), "mean_ms": statistics.fmean(v),
           "min_ms": min(v), "stdev_ms": statistics.stdev(v)} for m, v in times.items()}
pairs = [b - a for a, b in zip(times["off"], times["on"])]
out["overhead_median_pct"] = 100 * (out["on"]["median_ms"] / out["off"]["median_ms"] - 1)
out["overhead_mean_pct"] = 100 * (out["on"]["mean_ms"] / out["off"]["mean_ms"] - 1)
out["paired_diff_median_ms"] = statistics.median(pairs)
out["raw"] = times
print(json.dumps(out))
