"""Measure, on the GPU machine, the constants zym's what-if replay takes from the hardware when a
capture cannot supply them itself (rules/savings.py, analysis/replay.py):

* ``kineto_ns_per_event``: CPU time torch.profiler (CPU + CUDA activities, with_stack,
  record_shapes) adds per recorded CPU event (Python span, torch op, runtime call), from the
  same passes of a workload timed with and without it, interleaved;
* ``graph_launch_ns`` and ``graph_node_ns``: the CPU cost of one CUDA graph replay and the GPU
  time each kernel node adds in a graph, against the same kernels launched eagerly;
* ``async_copy_call_ns``: the CPU cost of a small non-blocking copy from pinned memory;
* ``gemm``: achieved TFLOP/s of fp32 (CUDA cores), tf32, fp16 and bf16 GEMMs at decode and
  prefill shapes, with the kernel names cuBLAS picked (checks kernel_classes.yaml).

    python bench/whatif/calibrate.py OUT.json [graph,copy,gemm,profiler]
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "workloads"))


def profiler_cost(workload: str, pairs: int = 5) -> dict:
    """Per-event CPU cost of torch.profiler on ``workload``'s passes (interleaved pairs)."""
    from harness import load, serve

    svc = load(workload).build("base", "cuda")
    plain, traced, trace = plain_and_traced(lambda: serve(svc, 1), pairs)
    cats = {}
    for e in trace:
        if e.get("ph") == "X":
            cats[e.get("cat")] = cats.get(e.get("cat"), 0) + 1
    events = {k: v for k, v in cats.items()
              if k in ("python_function", "cpu_op", "cuda_runtime", "cuda_driver",
                       "user_annotation")}
    n = sum(events.values())
    extra = statistics.median(traced) - statistics.median(plain)
    return {"workload": workload, "plain_s": plain, "traced_s": traced, "events": events,
            "events_total": n, "ns_per_event": extra * 1e9 / n if n else None}


def graph_costs(reps: int = 50) -> list[dict]:
    """Graphs of 20, 200 and 1,000 small kernels: each replay's GPU time against the summed
    durations of its kernels (as CUPTI records them), and the CPU time of one replay call."""
    from torch.profiler import ProfilerActivity, profile

    out = []
    for nodes in (20, 200, 1000):
        x = torch.zeros(1024, device="cuda")
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3 * nodes):
                x.add_(1.0)
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(nodes):
                x.add_(1.0)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        gpu = []
        for _ in range(reps):
            start.record()
            g.replay()
            end.record()
            torch.cuda.synchronize()
            gpu.append(start.elapsed_time(end) * 1e6)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            g.replay()
            torch.cuda.synchronize()
        kernel_ns = [(e.time_range.end - e.time_range.start) * 1e3 for e in prof.events()
                     if e.device_type.name == "CUDA" and "add" in e.name]
        cpu = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t = time.perf_counter_ns()
            g.replay()
            cpu.append(time.perf_counter_ns() - t)
        replay_ns = statistics.median(gpu)
        out.append({"nodes": nodes, "replay_gpu_ns": replay_ns, "kernels_seen": len(kernel_ns),
                    "kernel_ns_sum": sum(kernel_ns),
                    "graph_node_ns": (replay_ns - sum(kernel_ns)) / nodes,
                    "graph_launch_ns": statistics.median(cpu)})
    return out


def async_copy_cost(reps: int = 200) -> dict:
    src = torch.ones(16, dtype=torch.long).pin_memory()
    dst = torch.empty(16, dtype=torch.long, device="cuda")
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter_ns()
        dst.copy_(src, non_blocking=True)
        times.append(time.perf_counter_ns() - t)
    return {"async_copy_call_ns": statistics.median(times)}


def gemm_survey() -> list[dict]:
    from torch.profiler import ProfilerActivity, profile

    out = []
    shapes = [(m, k, n) for m in (16, 64, 256, 1024, 4096)
              for k, n in ((1024, 4096), (4096, 1024), (4096, 4096))]
    for name, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                              ("fp16", torch.float16, False), ("bf16", torch.bfloat16, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for m, k, n in shapes:
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype)
            for _ in range(5):
                a @ b
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            times = []
            for _ in range(20):
                start.record()
                a @ b
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) * 1e6)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                a @ b
                torch.cuda.synchronize()
            kernels = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
            ns = statistics.median(times)
            out.append({"math": name, "m": m, "k": k, "n": n, "ns": ns,
                        "tflops": 2 * m * n * k / ns / 1e3, "kernels": kernels})
    torch.backends.cuda.matmul.allow_tf32 = False
    return out


def profiler_micro(n: int = 20000, pairs: int = 5) -> dict:
    """CPU cost torch.profiler (CPU + CUDA, with_stack, record_shapes) adds per event of each
    kind, from three loops that are CPU-bound by design, timed with and without it,
    interleaved: Python calls only (python_function), torch ops on small CPU tensors (cpu_op +
    python_function), and launches of a tiny CUDA kernel (cpu_op + cuda_runtime +
    python_function). Per-kind costs are solved from the three: each loop's extra time is the
    sum over kinds of count x cost."""
    import numpy as np

    def py_loop():
        def f(x):
            return x + 1
        x = 0
        for _ in range(n):
            x = f(x)

    a = torch.ones(4)

    def op_loop():
        for _ in range(n):
            a.add(1)

    g = torch.ones(4, device="cuda")

    def launch_loop():
        for _ in range(n):
            g.add_(1)
        torch.cuda.synchronize()

    kinds = ("python_function", "cpu_op", "cuda_runtime")
    loops = {"python": py_loop, "torch_op": op_loop, "launch": launch_loop}
    out, rows, extra = {}, [], []
    for name, fn in loops.items():
        plain, traced, events = plain_and_traced(fn, pairs)
        counts = {k: sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == k)
                  for k in kinds}
        delta = (statistics.median(traced) - statistics.median(plain)) * 1e9
        out[name] = {"plain_s": plain, "traced_s": traced, "events": counts, "extra_ns": delta}
        rows.append([counts[k] for k in kinds])
        extra.append(delta)
    cost, *_ = np.linalg.lstsq(np.array(rows, float), np.array(extra), rcond=None)
    out["ns_per_event"] = dict(zip(kinds, (float(c) for c in cost)))
    return out


def plain_and_traced(fn, pairs: int) -> tuple[list[float], list[float], list[dict]]:
    """``fn`` run once, then ``pairs`` times plain and under torch.profiler (CPU + CUDA
    activities, with_stack, record_shapes: the harness's trace settings), alternating: the
    seconds of each, and the events of the first traced run (its exported trace's)."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    fn()
    plain, traced, events = [], [], None
    for _ in range(pairs):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        plain.append(time.perf_counter() - t)
        with profile(activities=acts, with_stack=True, record_shapes=True) as prof:
            t = time.perf_counter()
            fn()
            traced.append(time.perf_counter() - t)
        if events is None:
            path = Path(tempfile.mkdtemp()) / "t.json"
            prof.export_chrome_trace(str(path))
            events = json.loads(path.read_text())["traceEvents"]
    return plain, traced, events


PARTS = {"graph": graph_costs, "profiler_micro": profiler_micro, "copy": async_copy_cost, "gemm": gemm_survey,
         "profiler": lambda: [profiler_cost(w) for w in ("decode_loop", "gpt_decode")]}


def main() -> int:
    out = Path(sys.argv[1])
    parts = sys.argv[2].split(",") if len(sys.argv) > 2 else list(PARTS)
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    result |= {p: PARTS[p]() for p in parts}
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "gemm"}, indent=1)[:3000])
    for g in result.get("gemm", []):
        print(f"{g['math']:5s} {g['m']:5d}x{g['k']:5d}x{g['n']:5d} {g['tflops']:7.1f} TFLOP/s "
              f"{g['kernels'][:1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
