"""Predicted vs measured: run a workload's variants (the baseline and each fix zym names) on a
GPU, interleaved, and time what users feel (one pass over the workload's requests, end to end).

    python bench/whatif/harness.py WORKLOAD serve [--passes N] [--variant V]   # for zym capture
    python bench/whatif/harness.py WORKLOAD trace OUT.json [--passes N]   # baseline under
                                                                     # torch.profiler (stacks)
    python bench/whatif/harness.py WORKLOAD measure OUT.json [--rounds R] [--variants a,b]
    python bench/whatif/harness.py WORKLOAD paired OUT.json --ready F --stop F [--rounds R]
    python bench/whatif/harness.py WORKLOAD soak OUT.json --stop F

WORKLOAD is a module of bench/whatif/workloads/ (gpt_decode, rerank, decode_loop). Each builds
a ``Service`` per variant: ``requests`` and ``handle(request)`` (the step zym finds), and
``tf32`` (a process-wide switch, set only while that service runs, under inference mode, or with autograd on where the service says ``grad``). ``serve`` and ``trace`` run a
warm-up pass, then ``--passes`` passes over the same requests, as a service in steady state
does; ``measure`` builds every variant, warms each up, then times one pass of each variant per
round in a shuffled order, ``--rounds`` times, and writes every time to OUT.json; ``paired``
does the same, but after half the rounds creates ``--ready`` and serves the baseline until
``--stop`` exists (a ``zym capture --pid`` of this process meanwhile: the capture and the
measurement share the process and the moment); ``soak`` serves the baseline until ``--stop``,
timing every pass (to see a process's speed before, during and after an attach).

Runs where torch and a CUDA GPU are (the H200 of the device tool); ``--device cpu`` runs the
same code on the CPU to check it (timings then mean nothing).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "workloads"))


def load(workload: str):
    return importlib.import_module(workload)


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def active(svc):
    """While ``svc`` serves: inference mode (autograd on instead where the service says
    ``grad``: one that never turns it off), and TF32 matmuls if the variant turns them on."""
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = getattr(svc, "tf32", False)
    try:
        with torch.enable_grad() if getattr(svc, "grad", False) else torch.inference_mode():
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def serve(svc, passes: int) -> None:
    """``passes`` passes over the requests: the requests are the steps."""
    with active(svc):
        for _ in range(passes):
            for request in svc.requests:
                svc.handle(request)
        sync(svc.device)


def timed_pass(svc) -> float:
    sync(svc.device)
    start = time.perf_counter()
    serve(svc, 1)
    return time.perf_counter() - start


def build(mod, variant: str, device: str, requests: int | None):
    svc = mod.build(variant, device)
    if requests:  # a shorter pass, to check the code paths (--device cpu)
        svc.requests = svc.requests[:requests]
    return svc


def measure(mod, variants: list[str], rounds: int, device: str, requests: int | None = None,
            seed: int = 0, between=None) -> dict:
    """Every variant, ``rounds`` rounds of one timed pass each in a shuffled order; with
    ``between`` (a callable taking the base service), half the rounds, ``between``, the rest."""
    services = {v: build(mod, v, device, requests) for v in variants}
    for svc in services.values():  # warm-up: the same requests, so every shape is known
        serve(svc, 1)
    times: dict[str, list[float]] = {v: [] for v in variants}
    rng = random.Random(seed)
    for r in range(rounds):
        if between is not None and r == rounds // 2:
            between(services["base"])
        order = list(variants)
        rng.shuffle(order)
        for v in order:
            times[v].append(timed_pass(services[v]))
    out = {}
    for v, ts in times.items():
        q = statistics.quantiles(ts, n=4) if len(ts) >= 2 else [ts[0]] * 3
        out[v] = {"fix": mod.VARIANTS[v], "times_s": ts, "median_s": statistics.median(ts),
                  "p25_s": q[0], "p75_s": q[2], "min_s": min(ts), "max_s": max(ts)}
    return out


def serve_until(svc, stop: Path, log: list) -> None:
    """Timed passes of ``svc`` until ``stop`` exists; ``log`` gets (monotonic ns, seconds)."""
    while not stop.exists():
        t = time.monotonic_ns()
        log.append((t, timed_pass(svc)))


def environment(device: str) -> dict:
    import torch

    env = {"torch": torch.__version__, "python": platform.python_version(), "device": device}
    if device == "cuda":
        env |= {"gpu": torch.cuda.get_device_name(0), "cuda": torch.version.cuda}
    return env


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("workload")
    p.add_argument("mode", choices=["serve", "trace", "measure", "paired", "soak"])
    p.add_argument("out", nargs="?")
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--variants", default="")
    p.add_argument("--variant", default="base", help="serve/trace: the variant to run")
    p.add_argument("--device", default="cuda")
    p.add_argument("--requests", type=int, default=None, help="serve only the first N")
    p.add_argument("--trace-opts", default="stack,shapes",
                   help="trace: torch.profiler settings, comma-separated: stack, shapes, memory "
                        "(profile_memory), flops (with_flops), schedule (wait 1, warmup 1, "
                        "active = the passes, one profiler step a pass, written by "
                        "tensorboard_trace_handler into OUT, a folder), schedule2 (the same "
                        "twice: two files)")
    p.add_argument("--ready", type=Path, help="paired: created when the capture may start")
    p.add_argument("--stop", type=Path, help="paired, soak: serve the baseline until this exists")
    p.add_argument("--times", default=None,
                   help="serve: write each timed pass's seconds (after the warm-up) as JSON")
    a = p.parse_args()
    mod = load(a.workload)
    if a.mode == "serve":
        svc = build(mod, a.variant, a.device, a.requests)
        serve(svc, 1)  # warm-up
        if not a.times:
            serve(svc, a.passes)
            return 0
        passes = [timed_pass(svc) for _ in range(a.passes)]
        Path(a.times).write_text(json.dumps({"workload": a.workload, "pass_s": passes,
                                             "requests_per_pass": len(svc.requests)}))
        return 0
    if a.mode == "trace":
        from torch.profiler import ProfilerActivity, profile

        svc = build(mod, a.variant, a.device, a.requests)
        serve(svc, 1)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if a.device == "cuda"
                                               else [])
        opts = set(a.trace_opts.split(","))
        kw = {"with_stack": "stack" in opts, "record_shapes": "shapes" in opts,
              "profile_memory": "memory" in opts, "with_flops": "flops" in opts}
        if opts & {"schedule", "schedule2"}:  # torch's docs' pattern: a step per pass, files
            from torch.profiler import schedule, tensorboard_trace_handler  # by host and pid

            cycles = 2 if "schedule2" in opts else 1  # schedule2: two cycles, a file each
            with profile(activities=activities, schedule=schedule(wait=1, warmup=1,
                                                                  active=a.passes, repeat=cycles),
                         on_trace_ready=tensorboard_trace_handler(a.out), **kw) as prof:
                for _ in range((a.passes + 2) * cycles):
                    serve(svc, 1)
                    prof.step()
            return 0
        with profile(activities=activities, **kw) as prof:
            serve(svc, a.passes)
        prof.export_chrome_trace(a.out)
        return 0
    if a.mode == "soak":  # the baseline as a service, every pass timed, until --stop
        svc = build(mod, a.variant, a.device, a.requests)
        serve(svc, 1)
        log: list = []
        serve_until(svc, a.stop, log)
        Path(a.out).write_text(json.dumps({"workload": a.workload, "passes": log,
                                           "requests_per_pass": len(svc.requests)}))
        return 0
    variants = a.variants.split(",") if a.variants else list(mod.VARIANTS)
    captured: list = []

    def capture_window(base) -> None:  # paired: the baseline served while zym attaches
        a.ready.touch()
        serve_until(base, a.stop, captured)

    result = {"workload": a.workload, "rounds": a.rounds, "requests_per_pass": a.requests,
              "env": environment(a.device),
              "variants": measure(mod, variants, a.rounds, a.device, a.requests,
                                  between=capture_window if a.mode == "paired" else None)}
    if a.mode == "paired":
        result["captured_passes"] = captured
    Path(a.out).write_text(json.dumps(result, indent=1))
    for v, r in result["variants"].items():
        print(f"{a.workload:12s} {v:14s} median {r['median_s'] * 1e3:8.2f} ms  "
              f"[{r['p25_s'] * 1e3:.2f}, {r['p75_s'] * 1e3:.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
