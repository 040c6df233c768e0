"""CUPTI-only capture without root, and finalizing spools captured elsewhere.

    python -m zym.capture.cupti run -o trace.parquet -- python serve.py ...
    python -m zym.capture.cupti finalize SPOOL_DIR -o trace.parquet

``run`` starts the command with the bootstrap on its PYTHONPATH, waits for it (Ctrl-C is passed
on to it; what was recorded is kept), then writes a capture whose calls come from CUPTI's API
records (no Python stacks: those need the eBPF side, ``zym capture`` as root).
"""
from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from zym.schemas import ZymError

from . import target_env
from .finalize import finalize_capture


def _summary(path: Path, meta) -> str:
    c = meta.extra.get("cupti", {})
    cov, join = c.get("stack_coverage", {}), c.get("join", {})
    fits = c.get("clock_fit", {})
    err = max((f.get("max_residual_ns", 0) for f in fits.values()), default=0)
    return (f"{path}: {cov.get('gpu_ops', 0)} GPU ops, {join.get('cupti_api_calls', 0)} API calls, "
            f"{cov.get('gpu_time_with_stack_pct', 0.0)}% of GPU time with a Python stack, "
            f"clock fit residual {err:.0f} ns, CUPTI dropped {meta.dropped.get('cupti', 0)}\n"
            f"next: zym analyze {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m zym.capture.cupti", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run a command under the CUPTI collector")
    run.add_argument("-o", "--output", required=True, type=Path)
    run.add_argument("--keep-spool", action="store_true")
    run.add_argument("command", nargs=argparse.REMAINDER)
    fin = sub.add_parser("finalize", help="write a capture from a spool directory")
    fin.add_argument("spool_dir", type=Path)
    fin.add_argument("-o", "--output", required=True, type=Path)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "finalize":
            path, meta = finalize_capture(args.spool_dir, args.output)
            print(_summary(path, meta))
            return 0
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            ap.error("give the command after --")
        spool = Path(tempfile.mkdtemp(prefix="zym-cupti-", dir=args.output.parent.resolve()))
        proc = subprocess.Popen(command, env=target_env(spool))
        try:
            rc = proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            rc = proc.wait()
        path, meta = finalize_capture(spool, args.output)
        print(_summary(path, meta) + (f"\n(target exited with {rc})" if rc else ""))
        if not args.keep_spool:
            shutil.rmtree(spool, ignore_errors=True)
        return 0
    except ZymError as e:
        print(f"zym: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
