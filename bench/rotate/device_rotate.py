"""`zym capture --rotate` (eBPF + CUPTI) on the GPU machine, where zym is not installed.

    python3 bench/rotate/device_rotate.py -o OUT.parquet --rotate 4 [--keep N] -- python3 serve.py

zym's packages are made importable by the shim of tests/ebpf/device/capture_driver.py; polars
must be importable (carried: bench/rotate/device_rotate.sh). The same as `zym capture --rotate`
(``capture_with_gpu`` with ``rotate_s``): each interval finalized there, while the target runs.
Prints the summary as JSON on the last line; exit 0 when files were written.
"""
import argparse
import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--output", required=True, type=Path)
    ap.add_argument("--rotate", type=float, required=True)
    ap.add_argument("--keep", type=int, default=None)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    spec = importlib.util.spec_from_file_location(
        "capture_driver", REPO / "tests" / "ebpf" / "device" / "capture_driver.py")
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    driver.import_zym()
    import polars  # noqa: F401  (must be the real one: the intervals are finalized here)
    from zym.capture.cupti.integrate import capture_with_gpu
    from zym.capture.session import CaptureConfig

    cfg = CaptureConfig(output=a.output, command=command, rotate_s=a.rotate, keep=a.keep,
                        labels={"service": "device-check"})
    s = capture_with_gpu(cfg)
    print(json.dumps({"calls": s.calls, "seconds": s.seconds,
                      "outputs": [str(p) for p in s.outputs], "gpu": s.gpu}, default=str))
    return 0 if s.outputs else 2


if __name__ == "__main__":
    sys.exit(main())
