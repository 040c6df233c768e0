"""What `zym capture` adds to a CUDA call, and to a workload end to end.

    python bench/capture_overhead.py percall --lib standin -o out/percall.json
    python bench/capture_overhead.py e2e -o out/e2e.json -- python workload.py --out {out}
    python bench/capture_overhead.py report out/*.json          # the tables for benchmarks.md

percall: bench/workloads/driver_loop.py runs launch, copy and sync calls at Python stack depths
10/50/150, in separate processes, plain and under a capture, alternated ``--pairs`` times. One
capture per depth (every kind inside it), so the capture's own ``capture_cost`` (BPF run time
per program, i.e. per call kind; traps; ring buffer bytes; consumer CPU) is the breakdown of
that depth. Arms: ``--consumer idle`` (zym on its own core) and ``shared`` (zym on the target's
core); ``--cupti on`` starts CUPTI in the target (``ZYM_CUPTI_EAGER=1``; real CUDA only).
``--lib standin`` builds tests/ebpf/fakecuda.c twice: as the tests build it (``-O2``: functions
start with ``mov``, which uprobes single-step) and as distributions build libraries
(``-fcf-protection -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer``: ``endbr64; push``);
``--lib real`` uses the system's libcuda.so.1. ``--trap`` also times a probe whose program
does nothing (the trap alone) on the same symbols.

e2e: the command (``{out}`` is replaced by a JSON file it must write, holding a ``per_step_ms``
list) runs plain and captured, alternated (ABAB...), ``--pairs`` pairs; medians and spread of
the per-run median step time.

``--zym`` is the command that runs a capture (default: this interpreter's ``zym capture``; on
the GPU machine, bench/device/zym_lean.py). Raw capture metadata is read from
``OUT.raw/meta.json`` (``--keep-raw``), so a host that cannot finalize (no polars) works too.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DRIVER_LOOP = HERE / "workloads" / "driver_loop.py"
FAKECUDA = REPO / "tests" / "ebpf" / "fakecuda.c"
STANDIN_BUILDS = {
    "standin-O2": ["-O2"],
    "standin-cet-fp": ["-O2", "-fcf-protection=full", "-fno-omit-frame-pointer",
                       "-mno-omit-leaf-frame-pointer"],
}


def build_standins(dest: Path) -> dict[str, Path]:
    out = {}
    for name, flags in STANDIN_BUILDS.items():
        d = dest / name
        d.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", "-shared", "-fPIC", *flags, "-o", str(d / "libcuda.so.1"),
                        str(FAKECUDA)], check=True)
        out[name] = d / "libcuda.so.1"
    return out


def pinned(cpu: int | None, cmd: list[str]) -> list[str]:
    return ["taskset", "-c", str(cpu), *cmd] if cpu is not None and shutil.which("taskset") else cmd


def raw_meta(output: Path) -> dict:
    """The capture's metadata, from its raw directory (kept) or its file."""
    meta = output.with_name(output.name + ".raw") / "meta.json"
    if meta.exists():
        return json.loads(meta.read_text())
    try:
        from zym.schemas import open_capture

        m = open_capture(output).meta
        return {"extra": m.extra, "dropped": m.dropped}
    except Exception:  # noqa: BLE001 (no capture at all: reported as missing)
        return {}


def run_loop(lib: str, env: dict, args: list[str], zym: list[str] | None, out_dir: Path,
             tag: str, target_cpu: int | None, zym_cpu: int | None, timeout: float) -> dict:
    """One driver_loop process, plain (zym None) or captured; returns its results."""
    res = out_dir / f"{tag}.json"
    cmd = pinned(target_cpu, [sys.executable, str(DRIVER_LOOP), "--lib", lib, "--out", str(res),
                              *args])
    meta = None
    if zym is not None:
        cap = out_dir / f"{tag}.parquet"
        cmd = pinned(zym_cpu, [*zym, "-o", str(cap), "--keep-raw", "--", *cmd])
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    if not res.exists():
        raise SystemExit(f"capture_overhead: {tag} wrote no result (rc {proc.returncode}):\n"
                         f"{proc.stderr[-3000:]}")
    out = json.loads(res.read_text())
    out["wall_s"] = time.monotonic() - t0
    if zym is not None:
        meta = raw_meta(out_dir / f"{tag}.parquet")
        out["capture_cost"] = meta.get("extra", {}).get("capture_cost")
        out["probe_placement"] = meta.get("extra", {}).get("probe_placement")
        out["zym_stderr_tail"] = proc.stderr[-1500:]
    return out


def percall(a: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="zym-percall-"))
    zym = shlex.split(a.zym)
    if a.lib == "standin":
        libs = {name: str(p) for name, p in build_standins(work / "libs").items()}
    else:
        libs = {"real": "real"}
    kinds, depths = a.kinds, [int(d) for d in a.depths.split(",")]
    results: dict = {"machine": os.uname().nodename, "cpus": os.cpu_count(), "runs": []}
    for lib_name, lib in libs.items():
        env = dict(os.environ)
        if lib != "real":
            env["LD_LIBRARY_PATH"] = str(Path(lib).parent)   # attached before the target runs
        if a.trap:
            results.setdefault("trap", {})[lib_name] = trap_floor(lib, kinds, work, a)
        for consumer in a.consumer.split(","):
            zym_cpu = a.target_cpu if consumer == "shared" else a.zym_cpu
            for cupti in a.cupti.split(","):
                arm_env = dict(env)
                if cupti == "on":
                    arm_env["ZYM_CUPTI_EAGER"] = "1"
                for pair in range(a.pairs):
                    for depth in depths:
                        loop_args = ["--kinds", kinds, "--depths", str(depth), "--calls",
                                     str(a.calls), "--batches", str(a.batches), "--settle", "0.3"]
                        tag = f"{lib_name}-{consumer}-cupti{cupti}-d{depth}-p{pair}"
                        for arm in ("plain", "zym"):
                            r = run_loop(lib, arm_env, loop_args, zym if arm == "zym" else None,
                                         work, f"{tag}-{arm}", a.target_cpu, zym_cpu, a.timeout)
                            results["runs"].append({**r, "lib": lib_name, "consumer": consumer,
                                                    "cupti": cupti, "pair": pair, "depth": depth,
                                                    "arm": arm})
                            _save(a.output, {**results, "partial": True})
                            print(f"{tag} {arm}: " + ", ".join(
                                f"{x['kind']} {statistics.median(x['ns_per_call']):.0f} ns"
                                for x in r["results"]), file=sys.stderr, flush=True)
    results["summary"] = summarize_percall(results["runs"])
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return results


def trap_floor(lib: str, kinds: str, work: Path, a: argparse.Namespace) -> dict:
    """ns added per call by a probe whose BPF program does nothing, on each probed symbol,
    placed as zym places it: the trap alone."""
    _import_zym()
    from zym.capture.bpf_loader import import_bcc
    from zym.capture.prologue import choose, read_function_start

    bcc = import_bcc()
    path = os.path.realpath((_real_libcuda() or "libcuda.so.1") if lib == "real" else lib)
    symbols = {"launch": "cuLaunchKernel", "copy": "cuMemcpyHtoDAsync_v2",
               "sync": "cuStreamSynchronize"}
    b = bcc.BPF(text="int zym_nothing(void *ctx) { return 0; }")
    placements = {}
    for kind in kinds.split(","):
        sym = symbols[kind]
        _, off = b._check_path_symbol(path.encode(), sym.encode(), None, -1)
        place = choose(read_function_start(path, off))
        b.attach_uprobe(name=path, sym=sym, sym_off=place.offset, fn_name="zym_nothing")
        placements[kind] = {"offset": place.offset, "emulated": place.emulated,
                            "first_bytes": place.first}
    try:
        r = run_loop(lib, {**os.environ}, ["--kinds", kinds, "--depths", "50", "--calls",
                                           str(a.calls), "--batches", str(a.batches)],
                     None, work, f"trap-{Path(lib).parent.name}", a.target_cpu, None, a.timeout)
    finally:
        b.cleanup()
    plain = run_loop(lib, {**os.environ}, ["--kinds", kinds, "--depths", "50", "--calls",
                                           str(a.calls), "--batches", str(a.batches)],
                     None, work, f"trap-plain-{Path(lib).parent.name}", a.target_cpu, None,
                     a.timeout)
    pm = {x["kind"]: statistics.median(x["ns_per_call"]) for x in plain["results"]}
    return {x["kind"]: {"trap_ns": statistics.median(x["ns_per_call"]) - pm[x["kind"]],
                        **placements[x["kind"]]} for x in r["results"]}


def _import_zym() -> None:
    """zym's capture package, installed or (on the GPU machine) through the device shim."""
    try:
        import zym.capture  # noqa: F401
    except ImportError:
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "capture_driver", REPO / "tests" / "ebpf" / "device" / "capture_driver.py")
        driver = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(driver)
        driver.import_zym()


def _real_libcuda() -> str | None:
    """The file the dynamic linker loads as libcuda.so.1 here."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "/libcuda.so" in path:
                return path
    return None


def summarize_percall(runs: list[dict]) -> list[dict]:
    """Per (lib, consumer, cupti, kind, depth): added ns per call (captured - plain median of
    each pair), its median and range over pairs, and the capture's own breakdown."""
    groups: dict[tuple, dict[str, dict]] = {}
    for r in runs:
        for x in r["results"]:
            key = (r["lib"], r["consumer"], r["cupti"], x["kind"], r["depth"])
            groups.setdefault(key, {}).setdefault(r["pair"], {})[r["arm"]] = (
                statistics.median(x["ns_per_call"]), r.get("capture_cost"))
    out = []
    for (lib, consumer, cupti, kind, depth), pairs in sorted(groups.items()):
        added = [p["zym"][0] - p["plain"][0] for p in pairs.values() if {"zym", "plain"} <= set(p)]
        plain = [p["plain"][0] for p in pairs.values() if "plain" in p]
        costs = [p["zym"][1] for p in pairs.values() if "zym" in p and p["zym"][1]]
        est = [c.get(f"added_ns_per_call_{kind}") for c in costs]
        est = [e for e in est if e is not None]
        out.append({
            "lib": lib, "consumer": consumer, "cupti": cupti, "kind": kind, "depth": depth,
            "plain_ns": round(statistics.median(plain)) if plain else None,
            "added_ns_median": round(statistics.median(added)) if added else None,
            "added_ns_min": round(min(added)) if added else None,
            "added_ns_max": round(max(added)) if added else None,
            "pairs": len(added),
            "estimated_added_ns": round(statistics.median(est)) if est else None,
            "bpf_ns_per_call": _median([c.get("bpf_ns_per_call") for c in costs]),
            "trap_ns_emulated": _median([c.get("trap_ns_emulated") for c in costs]),
            "trap_ns_single_step": _median([c.get("trap_ns_single_step") for c in costs]),
            "consumer_cpu_ns_per_call": _median([c.get("consumer_cpu_ns_per_call") for c in costs]),
            "ring_bytes_per_call": _median([c["ring_bytes"] / c["calls_seen"] for c in costs
                                            if c.get("calls_seen")]),
            "single_stepped": sorted({s for c in costs for s in c.get("probes_single_stepped", [])}),
        })
    return out


def _save(path: str, result: dict) -> None:
    """Write results so far: a run cut short by its time limit still leaves them."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(path)


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 1) if values else None


def e2e(a: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="zym-e2e-"))
    zym = shlex.split(a.zym)
    runs = []
    for pair in range(a.pairs):
        for arm in ("plain", "zym"):
            res = work / f"{a.name}-{pair}-{arm}.json"
            cmd = pinned(a.target_cpus, [c.replace("{out}", str(res)) for c in a.command])
            if arm == "zym":
                cap = work / f"{a.name}-{pair}.parquet"
                cmd = pinned(a.zym_cpu, [*zym, "-o", str(cap), "--keep-raw", "--", *cmd])
            t0 = time.monotonic()
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout,
                                  check=False)
            if not res.exists():
                print(f"capture_overhead: {a.name} {arm} {pair} wrote no result (rc "
                      f"{proc.returncode}): {proc.stderr[-2000:]}", file=sys.stderr)
                continue
            r = json.loads(res.read_text())
            run = {"pair": pair, "arm": arm, "wall_s": time.monotonic() - t0,
                   "median_step_ms": statistics.median(r["per_step_ms"]), **r}
            if arm == "zym":
                meta = raw_meta(work / f"{a.name}-{pair}.parquet")
                run["capture_cost"] = meta.get("extra", {}).get("capture_cost")
                run["dropped"] = meta.get("dropped")
            runs.append(run)
            _save(a.output, {"name": a.name, "command": a.command, "runs": runs, "partial": True,
                             "summary": summarize_e2e(runs)})
            print(f"{a.name} pair {pair} {arm}: {run['median_step_ms']:.3f} ms/step",
                  file=sys.stderr, flush=True)
    if a.keep_dir:
        dest = Path(a.keep_dir)
        dest.mkdir(parents=True, exist_ok=True)
        for p in work.glob("*.raw"):
            shutil.copytree(p, dest / p.name, dirs_exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    return {"name": a.name, "command": a.command, "runs": runs, "summary": summarize_e2e(runs)}


def summarize_e2e(runs: list[dict]) -> dict:
    by_pair: dict[int, dict] = {}
    for r in runs:
        by_pair.setdefault(r["pair"], {})[r["arm"]] = r["median_step_ms"]
    ratios = [p["zym"] / p["plain"] for p in by_pair.values() if {"zym", "plain"} <= set(p)]
    plain = [p["plain"] for p in by_pair.values() if "plain" in p]
    zym = [p["zym"] for p in by_pair.values() if "zym" in p]
    if not ratios:
        return {"pairs": 0}
    return {"pairs": len(ratios), "plain_ms_median": statistics.median(plain),
            "zym_ms_median": statistics.median(zym),
            "ratio_median": round(statistics.median(ratios), 4),
            "ratio_min": round(min(ratios), 4), "ratio_max": round(max(ratios), 4)}


def report(paths: list[str]) -> str:
    """Markdown tables from result files (for docs/benchmarks.md)."""
    lines = []
    for p in paths:
        data = json.loads(Path(p).read_text())
        if "runs" in data and data.get("summary") and isinstance(data["summary"], list):
            lines += [f"per-call ({p})", "",
                      ("| library | consumer | CUPTI | kind | depth | plain ns | added ns (median; min-max; pairs) "
                      "| estimated by the capture | BPF ns/call | trap ns (emulated / stepped) "
                      "| consumer CPU ns/call |"),
                      "|---|---|---|---|---:|---:|---|---:|---:|---|---:|"]
            for s in data["summary"]:
                lines.append(
                    f"| {s['lib']} | {s['consumer']} | {s['cupti']} | {s['kind']} | {s['depth']} "
                    f"| {s['plain_ns']} | {s['added_ns_median']} ({s['added_ns_min']}-"
                    f"{s['added_ns_max']}; {s['pairs']}) | {s['estimated_added_ns']} "
                    f"| {s['bpf_ns_per_call']} | {s['trap_ns_emulated']} / "
                    f"{s['trap_ns_single_step']} | {s['consumer_cpu_ns_per_call']} |")
            for lib, t in data.get("trap", {}).items():
                lines.append(f"\ntrap alone ({lib}): " + ", ".join(
                    f"{k} {v['trap_ns']:.0f} ns ({'emulated' if v['emulated'] else 'single-stepped'},"
                    f" +{v['offset']}, {v['first_bytes'][:8]})" for k, v in t.items()))
            lines.append("")
        elif "summary" in data:
            s = data["summary"]
            if s.get("pairs"):
                lines.append(f"e2e {data['name']}: plain {s['plain_ms_median']:.3f} ms/step, "
                             f"zym {s['zym_ms_median']:.3f} ms/step, ratio median "
                             f"{s['ratio_median']} (pairs {s['pairs']}, {s['ratio_min']}-"
                             f"{s['ratio_max']})")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    default_zym = f"{shlex.quote(sys.executable)} -m zym.cli.main capture"
    p = sub.add_parser("percall")
    p.add_argument("--lib", choices=("standin", "real"), default="standin")
    p.add_argument("--kinds", default="launch,copy,sync")
    p.add_argument("--depths", default="10,50,150")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--consumer", default="idle,shared")
    p.add_argument("--cupti", default="off")
    p.add_argument("--trap", action="store_true")
    p.add_argument("--target-cpu", type=int, default=0)
    p.add_argument("--zym-cpu", type=int, default=1)
    p.add_argument("--zym", default=default_zym)
    p.add_argument("--timeout", type=float, default=180)
    p.add_argument("--keep", action="store_true")
    p.add_argument("-o", "--output", required=True)
    e = sub.add_parser("e2e")
    e.add_argument("--name", required=True)
    e.add_argument("--pairs", type=int, default=7)
    e.add_argument("--target-cpus", default=None)
    e.add_argument("--zym-cpu", type=int, default=None)
    e.add_argument("--zym", default=default_zym)
    e.add_argument("--timeout", type=float, default=300)
    e.add_argument("--keep-dir", default=None, help="copy the raw captures here")
    e.add_argument("-o", "--output", required=True)
    e.add_argument("command", nargs=argparse.REMAINDER)
    r = sub.add_parser("report")
    r.add_argument("files", nargs="+")
    a = ap.parse_args()
    if a.mode == "report":
        print(report(a.files))
        return
    if a.mode == "e2e":
        a.command = a.command[1:] if a.command[:1] == ["--"] else a.command
        if not a.command:
            raise SystemExit("capture_overhead e2e: give the workload command after --")
    result = percall(a) if a.mode == "percall" else e2e(a)
    Path(a.output).parent.mkdir(parents=True, exist_ok=True)
    Path(a.output).write_text(json.dumps(result, indent=1))
    if a.mode == "percall":
        print(report([a.output]))


if __name__ == "__main__":
    main()
