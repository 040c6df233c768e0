"""Ctrl-C at random moments: the commands as users run them, each interrupted many times.

Each round starts one command (``zym import``, ``export``, ``report``, ``analyze`` of a
capture and of a trace, ``diff``) in a session of its own, waits past the interpreter's
start-up (and, in half the rounds of `analyze` of the trace and of `diff`, until the command
has forked its first child: they decode the trace in one), then a random time up to
``--spread`` seconds, and sends SIGINT to the whole process group (as a terminal's Ctrl-C) or
to the command alone. A round fails where stderr holds a traceback or "Exception", the exit code
is neither 0 (it finished first), 130 nor death by SIGINT, or the output folder holds
anything but the finished output (a temporary file left). A Ctrl-C during the interpreter's
own start-up is Python's to report, not zym's: it is not sent there.

    python bench/interrupts.py --zym /path/venv/bin/zym [--rounds 25] [--seed 3] \\
        [--signal INT|TERM] [--trace T.json.gz] [--capture C.parquet] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import write_json
from zym.capture.process import children

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "sample_traces" / "gpt_decode_server.trace.json.gz"
CAPTURE = ROOT / "sample_traces" / "gpt_decode_server.parquet"
OUTPUTS = {"o.parquet", "o.pftrace", "o.html"}


def commands(out: Path, trace: Path = TRACE, capture: Path = CAPTURE) -> dict[str, list[str]]:
    return {
        "import": ["import", str(trace), "-o", str(out / "o.parquet"), "--no-progress"],
        "export": ["export", str(capture), "--format", "perfetto", "-o", str(out / "o.pftrace")],
        "report": ["report", str(capture), "-o", str(out / "o.html")],
        "analyze-capture": ["analyze", str(capture), "--format", "json", "--no-progress"],
        "analyze-trace": ["analyze", str(trace), "--no-progress"],
        "diff": ["diff", str(capture), str(trace), "--no-progress"],
    }


def one(zym: str, name: str, rng: random.Random, spread: float, after_children: bool,
        sig: signal.Signals = signal.SIGINT, trace: Path = TRACE, capture: Path = CAPTURE) -> dict:
    out = Path(tempfile.mkdtemp(prefix="zym-int-"))
    try:
        proc = subprocess.Popen([zym, *commands(out, trace, capture)[name]], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True,
                                env={**os.environ, "ZYM_DECODE_AHEAD": "1"})
        time.sleep(0.06)  # past the interpreter's start-up
        if after_children:
            deadline = time.monotonic() + 10
            while not children(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.003)
        delay = rng.uniform(0, spread)
        time.sleep(delay)
        group = rng.random() < 0.5
        try:
            (os.killpg if group else os.kill)(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(timeout=120)
        err = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
        left = sorted(p.name for p in out.iterdir() if p.name not in OUTPUTS)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    codes = (0, 130, -signal.SIGINT) if sig == signal.SIGINT else (0, 143, -signal.SIGTERM)
    bad = ("Traceback" in err or "Exception" in err or proc.returncode not in codes
           or bool(left))
    return {"command": name, "delay_s": round(delay, 3), "to": "group" if group else "command",
            "code": proc.returncode, "left": left, "bad": bad, "stderr_tail": err[-400:] if bad else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zym", default=shutil.which("zym") or "zym")
    parser.add_argument("--rounds", type=int, default=25, help="per command")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--spread", type=float, default=1.0)
    parser.add_argument("--signal", choices=("INT", "TERM"), default="INT",
                        help="SIGINT (Ctrl-C; exit 130) or SIGTERM (exit 143)")
    parser.add_argument("--trace", type=Path, default=TRACE, help="a torch.profiler trace")
    parser.add_argument("--capture", type=Path, default=CAPTURE, help="a zym capture")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows = []
    for name in commands(Path("/")):
        for _ in range(args.rounds):
            rows.append(one(args.zym, name, rng, args.spread,
                            name in ("analyze-trace", "diff") and rng.random() < 0.5,
                            getattr(signal, "SIG" + args.signal), args.trace, args.capture))
            if rows[-1]["bad"]:
                print(f"BAD {json.dumps(rows[-1])}")
        mine = [r for r in rows if r["command"] == name]
        codes: dict[int, int] = {}
        for r in mine:
            codes[r["code"]] = codes.get(r["code"], 0) + 1
        print(f"{name}: {sum(r['bad'] for r in mine)} bad of {len(mine)}; exit codes {codes}")
    if args.json:
        write_json(args.json, {"zym": args.zym, "seed": args.seed, "signal": args.signal,
                               "trace": str(args.trace), "capture": str(args.capture),
                               "rounds": rows})
    sys.exit(1 if any(r["bad"] for r in rows) else 0)


if __name__ == "__main__":
    main()
