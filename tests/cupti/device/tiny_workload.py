"""GPU smoke workload for the CUPTI agent (run on the device, not by pytest).

Run with the bootstrap on PYTHONPATH and ZYM_CUPTI_DIR set. It launches kernels from two
threads, copies, memsets, syncs and replays a CUDA graph of many kernels, then stops the
collector and checks zym's record walk against CUPTI's own ``cuptiActivityGetNextRecord``.
Writes ``tiny.json`` (facts to compare with the decoded spool) to ``$ZYM_CUPTI_DIR``.
"""
import ctypes as ct
import json
import os
import sys
import threading

import torch

agent = sys.modules.get("_zym_cupti_agent")
facts = {"main_tid": threading.get_native_id(), "agent_loaded": agent is not None,
         "collector": bool(agent and agent._collector)}

x = torch.randn(512, 512, device="cuda")
y = x @ x                      # kernel
s = y.sum().item()             # kernel + DtoH copy + sync
z = torch.zeros(1 << 20, device="cuda")   # memset or fill kernel
h = y.cpu()                    # DtoH copy
torch.cuda.synchronize()


def worker(out):
    out["worker_tid"] = threading.get_native_id()
    a = torch.randn(256, 256, device="cuda")
    for _ in range(10):
        a = torch.relu(a @ a)
    torch.cuda.synchronize()


t = threading.Thread(target=worker, args=(facts,))
t.start(); t.join()

# A CUDA graph of 20 kernels, replayed 3 times.
g_in = torch.randn(256, 256, device="cuda")
stream = torch.cuda.Stream()
stream.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(stream):
    for _ in range(3):
        g_out = g_in
        for _ in range(20):
            g_out = g_out * 1.01
torch.cuda.current_stream().wait_stream(stream)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    g_out = g_in
    for _ in range(20):
        g_out = g_out * 1.01
for _ in range(3):
    graph.replay()
torch.cuda.synchronize()
facts["graph_replays"] = 3
facts["graph_kernels"] = 20

if agent and agent._collector:
    c = agent._collector
    c.stop("tiny_workload")
    lib = c.lib
    lib.cuptiActivityGetNextRecord.argtypes = [ct.c_void_p, ct.c_size_t, ct.POINTER(ct.c_void_p)]
    mismatches, total, kinds = 0, 0, {}
    for data in agent.read_activity_chunks(c.spool.path):
        buf = ct.create_string_buffer(data, len(data))
        base = ct.addressof(buf)
        rec = ct.c_void_p(None)
        theirs = []
        while lib.cuptiActivityGetNextRecord(base, len(data), ct.byref(rec)) == 0:
            theirs.append((rec.value - base, ct.c_int32.from_address(rec.value).value))
        offs, knd, _ = agent.record_offsets(data, agent.RECORD_SIZES[13])
        ours = list(zip(offs, knd))
        total += len(theirs)
        mismatches += int(ours != theirs)
        for _, k in theirs:
            kinds[k] = kinds.get(k, 0) + 1
    facts.update({"walk_buffers_mismatched": mismatches, "records": total, "kinds": kinds,
                  "stats": c.stats, "calibrations": c.calibrations[-3:],
                  "spool_format": c.spool.format, "lib": c.lib_path})
with open(os.path.join(os.environ.get("ZYM_CUPTI_DIR", "."), "tiny.json"), "w") as f:
    json.dump(facts, f, indent=1, default=str)
print(json.dumps(facts, default=str)[:3000])
