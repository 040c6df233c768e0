"""`zym capture` on the GPU machine, where zym is not installed and polars is absent.

    python3 bench/device/zym_lean.py -o OUT [--keep-raw] [--no-cupti] [--no-native] [--shapes]
                                     [--max-overhead PCT]
                                     [--return-probes] -- python3 serve.py ...
    python3 bench/device/zym_lean.py -o OUT --pid PID --duration S   # attach (zym run'd)
    python3 bench/device/zym_lean.py -o OUT --rotate 4 [--keep N] -- python3 serve.py ...

zym's packages are made importable by the shim of tests/ebpf/device/capture_driver.py. With
CUPTI (default) this is `zym capture` (``capture_with_gpu``); ``--no-cupti`` runs the eBPF
session alone (return probes then give sync durations). The capture cannot be finalized there:
``OUT.raw/`` (and ``OUT.cupti/``) are kept, for `zym capture --finalize OUT.raw -o OUT` here.
Exit 0 when the raw capture was kept, 2 otherwise. ``--rotate S`` is `zym capture --rotate`:
each interval is finalized there while the target runs, so polars must be importable (carried:
bench/whatif/device_new_b.sh); it prints the summary as JSON and exits 0 when files were written.
"""
import argparse
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--output", required=True, type=Path)
    ap.add_argument("--keep-raw", action="store_true")   # always kept: nothing can finalize here
    ap.add_argument("--no-cupti", action="store_true")
    ap.add_argument("--no-native", action="store_true")
    ap.add_argument("--shapes", action="store_true")
    ap.add_argument("--return-probes", action="store_true")
    ap.add_argument("--max-overhead", type=lambda s: float(s.rstrip("%")), default=None)
    ap.add_argument("--pid", type=int, default=None)
    ap.add_argument("--duration", type=float, default=None)
    ap.add_argument("--rotate", type=float, default=None,
                    help="seconds: `zym capture --rotate` (needs polars there: files written)")
    ap.add_argument("--keep", type=int, default=None)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    spec = importlib.util.spec_from_file_location(
        "capture_driver", REPO / "tests" / "ebpf" / "device" / "capture_driver.py")
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    driver.import_zym()
    from zym.capture.cupti.integrate import capture_with_gpu
    from zym.capture.session import CaptureConfig, run_capture
    from zym.schemas.errors import CaptureError

    cfg = CaptureConfig(output=a.output, command=command or None, pid=a.pid,
                        duration=a.duration, keep_raw=a.rotate is None,
                        force_return_probes=a.return_probes, max_overhead_pct=a.max_overhead,
                        native=not a.no_native, shapes=a.shapes, rotate_s=a.rotate,
                        keep=a.keep, labels={"service": "device-check"} if a.rotate else {})
    if a.rotate is not None:   # each interval finalized here: polars must be importable
        import json

        import polars  # noqa: F401  (the real one, carried: bench/whatif/device_new_b.sh)

        s = capture_with_gpu(cfg)
        print(json.dumps({"calls": s.calls, "seconds": s.seconds, "gpu": s.gpu,
                          "outputs": [str(p) for p in s.outputs]}, default=str))
        return 0 if s.outputs else 2
    try:
        print(run_capture(cfg) if a.no_cupti else capture_with_gpu(cfg), file=sys.stderr)
    except CaptureError as e:   # expected here: no polars to finalize with
        print(f"zym: {e}", file=sys.stderr)
    raw = a.output.with_name(a.output.name + ".raw")
    return 0 if (raw / "meta.json").exists() else 2


if __name__ == "__main__":
    sys.exit(main())
