"""CUPTI-only capture without root, and finalizing spools captured elsewhere.

    python -m zym.capture.cupti run -o trace.parquet [--duration S] -- python serve.py ...
    python -m zym.capture.cupti finalize SPOOL_DIR -o trace.parquet

``run`` starts the command with the bootstrap on its PYTHONPATH, waits for it (Ctrl-C and
``--duration`` interrupt it; what was recorded is kept), then writes a capture whose calls come
from CUPTI's API records (no Python stacks: those need the eBPF side, ``zym capture`` as root).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zym.schemas import ZymError

from .finalize import finalize_capture
from .integrate import run_cupti_only, summary_line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m zym.capture.cupti", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run a command under the CUPTI collector")
    run.add_argument("-o", "--output", required=True, type=Path)
    run.add_argument("--duration", type=float, default=None)
    run.add_argument("--keep-spool", action="store_true")
    run.add_argument("command", nargs=argparse.REMAINDER)
    fin = sub.add_parser("finalize", help="write a capture from a spool directory")
    fin.add_argument("spool_dir", type=Path)
    fin.add_argument("-o", "--output", required=True, type=Path)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "finalize":
            path, meta = finalize_capture(args.spool_dir, args.output)
            print(summary_line(path, meta), file=sys.stderr)
            return 0
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            ap.error("give the command after --")
        run_cupti_only(command, args.output, duration=args.duration, keep_spool=args.keep_spool)
        return 0
    except ZymError as e:
        print(f"zym: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
