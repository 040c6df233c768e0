"""`zym capture` with both sides on the GPU machine, where zym is not installed (device only).

    python3 combined_driver.py OUTPUT -- python3 serve.py ...

Same as tests/ebpf/device/capture_driver.py (whose zym import shim it reuses), but through
``capture_with_gpu``: the command also runs the CUPTI agent. The lean host cannot finalize
(no polars): ``OUTPUT.raw/`` and ``OUTPUT.cupti/`` are kept; finalize them where zym is
installed with ``zym capture --finalize OUTPUT.raw -o OUTPUT``, which joins both sides.
"""
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def main() -> int:
    args = sys.argv[1:]
    split = args.index("--")
    output, command = Path(args[0]), args[split + 1:]
    spec = importlib.util.spec_from_file_location(
        "capture_driver", REPO / "tests" / "ebpf" / "device" / "capture_driver.py")
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    driver.import_zym()
    from zym.capture.cupti.integrate import capture_with_gpu
    from zym.capture.session import CaptureConfig
    from zym.schemas.errors import CaptureError

    try:
        print(capture_with_gpu(CaptureConfig(output=output, command=command)), file=sys.stderr)
    except CaptureError as e:  # expected on the lean host: finalize elsewhere
        print(f"zym: {e}", file=sys.stderr)
    kept = [p.name for p in (output.parent / (output.name + ".raw"),
                             output.parent / (output.name + ".cupti")) if p.exists()]
    print(f"zym: kept {kept}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
