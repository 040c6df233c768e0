"""Benchmark at scale: `zym analyze` as users run it against HolisticTraceAnalysis and the
parse floors, on the bundled trace repeated x1, x10, x40 (bench/replicate_trace.py).

Every job is a fresh process, and the jobs of one round run one after another in a rotating
order (interleaved), so a change in machine load hits them alike; figures are medians over
rounds with their min-max, and ratios are taken within a round.

* ``zym analyze`` (CLI): the ``zym`` command, default rules, ``--format json`` into a pipe
  this script reads: the whole process (start, imports, decoding, tables, analysis, rules,
  report).
* ``HTA parse``: ``TraceAnalysis(trace_dir=...)`` in HTA's own venv (bench/child.py),
  whole process; HTA only parses here, it runs no analysis.
* ``zym JSON work``: zym's reading, gunzip and decoding into columns, in process (no imports).
* floors, in process: ISA-L gunzip alone; gunzip + splitting the events into raw slices
  (msgspec ``Raw``), the least any decoder that looks at each event does.

Peak memory: ``tree`` is the summed RSS of the job's processes (zym's decoding workers
included), sampled every 20 ms (a peak shorter than that can be missed); the in-process jobs
(bench/child.py) also report their own high-water mark (VmHWM).

    python bench/bench_scale.py --hta-python /path/to/hta-venv/bin/python \\
        [--zym /path/to/zym-venv/bin/zym] [--scales 1,10,40] [--rounds 7,5,2] \\
        [--hta-rounds 7,3,1]

``--zym``: the console script measured (default: the ``zym`` beside this python). HTA runs
from its own venv, installed by pip as users install it; ``--zym`` measures zym the same way
(``python -m venv V && V/bin/pip install .``: not editable, its own site-packages), not a
development checkout's editable install in a shared interpreter, whose start also runs that
interpreter's ``.pth`` hooks (here ~30 ms a process: the editable finder and the sandbox's
certificate hook). The report names the command measured and how it is installed.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
SAMPLE = REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"
CHILD = BENCH / "child.py"


def tree_rss_kb(pid: int) -> int:
    """Summed VmRSS of ``pid`` and its descendants (0 for those already gone)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total


def run_measured(cmd: list[str]) -> dict:
    """Run ``cmd``; wall seconds, peak summed RSS of its process tree (MB), and its last JSON
    line if any (bench/child.py's own timings)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss_kb(proc.pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    if proc.returncode:
        raise RuntimeError(f"{cmd[:3]} failed ({proc.returncode}): {err.decode()[-2000:]}")
    row = {"wall_s": wall, "tree_mb": peak[0] / 1024}
    lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith('{"')]
    if lines:
        row |= json.loads(lines[-1])
    return row


def make_input(scale: int, work: Path) -> Path:
    """The bundled trace repeated ``scale`` times (rank 0, for HTA), alone in its folder."""
    folder = work / f"x{scale}"
    path = folder / f"rank0_x{scale}.json.gz"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(BENCH / "replicate_trace.py"), str(SAMPLE),
                        str(scale), "-o", str(path), "--rank", "0"], check=True)
    return path


def fail(message: str) -> None:
    """Bad input: one line on stderr, named by the script run, exit 2."""
    print(f"{Path(sys.argv[0]).stem}: {message}", file=sys.stderr)
    raise SystemExit(2)


def write_json(path: Path, value: object) -> None:
    """``value`` as JSON at ``path``, whole or not at all (zym's ``atomic_output``: an old
    file stays as it was if the write fails); a path that cannot be written: ``fail``."""
    from zym.schemas.errors import ZymError
    from zym.schemas.output import atomic_output

    try:
        with atomic_output(path, force=True) as tmp:
            tmp.write_text(json.dumps(value, indent=1))
    except ZymError as e:
        fail(str(e))


def zym_command(args: argparse.Namespace) -> str:
    """The ``zym`` console script measured: ``--zym``, else the one beside this python."""
    return str(args.zym) if args.zym else str(Path(sys.executable).with_name("zym"))


def install_kind(zym: str) -> dict:
    """Where the measured zym's python finds zym, and whether that is an editable install
    (its modules read from a source tree through a ``.pth`` hook)."""
    version = subprocess.run([zym, "--version"], check=False, capture_output=True, text=True)
    if version.returncode or not version.stdout.startswith("zym "):
        fail(f"{zym}: not a zym command (`--version` said {version.stdout[:60]!r})")
    first = Path(shutil.which(zym) or zym).read_bytes()[:200].split(b"\n")[0].decode()
    python = first.removeprefix("#!").strip() if "python" in first else sys.executable
    where = ("import json, pathlib, zym.cli, sys; p = pathlib.Path(zym.cli.__file__).resolve();"
             "print(json.dumps({'python': sys.executable, 'package': str(p.parents[1]),"
             "'editable': 'site-packages' not in p.parts}))")
    out = subprocess.run([python, "-c", where], check=False, capture_output=True, text=True)
    if out.returncode:
        fail(f"{zym}: its python ({python}) cannot import zym: "
             f"{(out.stderr.strip().splitlines() or ['?'])[-1]}")
    return {"command": zym, **json.loads(out.stdout)}


def jobs_for(path: Path, args: argparse.Namespace, with_hta: bool) -> dict[str, list[str]]:
    zym = zym_command(args)
    jobs = {
        "zym analyze (CLI, rules on)": [zym, "analyze", str(path), "--format", "json",
                                        "--no-progress"],
        "zym JSON work (in process)": [sys.executable, str(CHILD), "zym_decode", str(path)],
        "floor: ISA-L gunzip": [sys.executable, str(CHILD), "floor_gunzip", str(path)],
        "floor: gunzip + raw event split": [sys.executable, str(CHILD), "floor_split",
                                            str(path)],
    }
    if with_hta:
        jobs["HTA parse"] = [args.hta_python, str(CHILD), "hta_parse", str(path.parent)]
    return jobs


def measure_scale(scale: int, rounds: int, hta_rounds: int, args: argparse.Namespace
                  ) -> dict[str, list[dict]]:
    path = make_input(scale, args.work)
    runs: dict[str, list[dict]] = {}
    for r in range(rounds):
        jobs = jobs_for(path, args, args.hta_python is not None and r < hta_rounds)
        names = list(jobs)
        names = names[r % len(names):] + names[:r % len(names)]  # rotate the order
        for name in names:
            row = run_measured(jobs[name])
            row["round"] = r
            runs.setdefault(name, []).append(row)
            print(f"x{scale} round {r} {name}: {row['wall_s']:.2f} s wall, "
                  f"work {row.get('work_s', float('nan')):.2f} s, tree {row['tree_mb']:.0f} MB",
                  file=sys.stderr, flush=True)
    return runs


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if len(values) == 1:
        return fmt.format(values[0]) + " (1 run)"
    return (fmt.format(statistics.median(values)) + " (" + fmt.format(min(values)) + "–"
            + fmt.format(max(values)) + ")")


def report(results: dict[int, dict[str, list[dict]]]) -> str:
    lines = []
    for scale, runs in results.items():
        lines += [f"### x{scale}", "",
                  ("| job | wall s | work s (in process) | peak MB (tree, sampled) | "
                   "peak MB (own VmHWM) | runs |"), "|---|---:|---:|---:|---:|---:|"]
        for name, rows in runs.items():
            work = [r["work_s"] for r in rows if "work_s" in r]
            own = [r["peak_mb"] for r in rows if "peak_mb" in r]
            lines.append(f"| {name} | {spread([r['wall_s'] for r in rows])} | "
                         f"{spread(work) if work else '—'} | "
                         f"{spread([r['tree_mb'] for r in rows], '{:.0f}')} | "
                         f"{spread(own, '{:.0f}') if own else '—'} | {len(rows)} |")
        zym = {r["round"]: r for r in runs["zym analyze (CLI, rules on)"]}
        hta = {r["round"]: r for r in runs.get("HTA parse", [])}
        paired = [(hta[k], zym[k]) for k in hta if k in zym]
        if paired:
            lines += ["", "HTA parse / zym analyze in the same round: wall "
                      + spread([h["wall_s"] / z["wall_s"] for h, z in paired], "{:.1f}x")
                      + ", peak memory (tree) "
                      + spread([h["tree_mb"] / z["tree_mb"] for h, z in paired], "{:.1f}x")]
        dec = {r["round"]: r for r in runs["zym JSON work (in process)"]}
        split = {r["round"]: r for r in runs["floor: gunzip + raw event split"]}
        both = [(dec[k], split[k]) for k in dec if k in split]
        lines += ["", "zym JSON work / gunzip + raw split floor, same round: "
                  + spread([d["work_s"] / s["work_s"] for d, s in both], "{:.2f}x"), ""]
    return "\n".join(lines)


def compile_bytecode(python: str) -> None:
    """Compile the modules of the zym that ``python`` imports to bytecode, as pip does when it
    installs a wheel: an editable install under PYTHONDONTWRITEBYTECODE=1 (this machine) has
    none, and each run would compile the modules it imports (~0.1 s a process), which HTA's
    installed packages do not."""
    where = "import pathlib, zym.cli; print(pathlib.Path(zym.cli.__file__).resolve().parents[1])"
    root = Path(subprocess.run([python, "-c", where], capture_output=True, text=True,
                               check=True).stdout.strip())
    subprocess.run([python, "-m", "compileall", "-q",
                    *(str(root / d) for d in ("analysis", "capture", "cli", "fleet", "rules",
                                              "schemas"))], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hta-python", help="python of a venv with HolisticTraceAnalysis")
    parser.add_argument("--scales", default="1,10,40")
    parser.add_argument("--rounds", default="7,5,2", help="rounds per scale")
    parser.add_argument("--hta-rounds", default="7,3,1", help="rounds with HTA per scale")
    parser.add_argument("--work", type=Path, default=BENCH / "out" / "scale")
    parser.add_argument("--json", type=Path, help="write the raw runs here")
    parser.add_argument("--zym", type=Path,
                        help="the zym console script to measure (default: beside this python)")
    args = parser.parse_args()
    if shutil.which(zym_command(args)) is None:
        fail(f"{zym_command(args)}: no zym command there: pip install . in a venv, or "
             "pip install -e . in this python's")
    installed = install_kind(zym_command(args))
    compile_bytecode(installed["python"])
    print(f"zym measured: {installed}")
    scales = [int(s) for s in args.scales.split(",")]
    rounds = [int(s) for s in args.rounds.split(",")]
    hta_rounds = [int(s) for s in args.hta_rounds.split(",")]
    results = {s: measure_scale(s, rounds[i], hta_rounds[i], args) for i, s in enumerate(scales)}
    if args.json:
        write_json(args.json, {**results, "zym": installed})
    print(report(results))


if __name__ == "__main__":
    main()
