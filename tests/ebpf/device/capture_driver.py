"""Run `zym capture` on the GPU machine, where zym is not installed (device only).

    python3 capture_driver.py OUTPUT [--sample N] -- python3 serve.py ...

The device has BCC (carried) and torch, but neither polars nor typer: zym's packages are made
importable through a namespace shim, polars is stubbed for the import of zym.schemas only
(capturing needs none of it), and the raw capture is kept for `zym capture --finalize` here.
"""
import json
import sys
import tempfile
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def import_zym() -> None:
    shim = Path(tempfile.mkdtemp()) / "zym"
    shim.mkdir()
    for pkg in ("capture", "schemas", "cli", "analysis"):
        (shim / pkg).symlink_to(REPO / pkg)
    sys.path.insert(0, str(shim.parent))
    try:
        import polars  # noqa: F401
    except ImportError:
        sys.modules["polars"] = types.ModuleType("polars")   # zym.schemas.io imports it
        import zym.schemas  # noqa: F401
        del sys.modules["polars"]


def main() -> int:
    args = sys.argv[1:]
    split = args.index("--")
    opts, command = args[:split], args[split + 1:]
    output = Path(opts[0])
    sample = int(opts[opts.index("--sample") + 1]) if "--sample" in opts else 1
    import_zym()
    from zym.capture.session import CaptureConfig, run_capture
    from zym.schemas.errors import CaptureError

    try:
        summary = run_capture(CaptureConfig(output=output, command=command, sample=sample))
    except CaptureError as e:
        print(f"zym: error: {e}", file=sys.stderr)
        raw = output.parent / (output.name + ".raw")
        if (raw / "meta.json").exists():
            meta = json.loads((raw / "meta.json").read_text())
            with open(next(raw.glob("calls.*")), "rb") as f:
                rows = sum(1 for _ in f)
            print(f"zym: kept raw: calls~{rows} dropped={meta['dropped']} "
                  f"extra={meta['extra']}", file=sys.stderr)
        return 0 if raw.exists() else 2
    print(summary, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
