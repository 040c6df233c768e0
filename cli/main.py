"""The `zym` command: a thin typer app over the library.

Each command lives in its own module and is registered here. Importing this module must not
import bcc or pyarrow, so `zym analyze` starts fast and works without root.
"""
from __future__ import annotations

import typer

app = typer.Typer(
    name="zym",
    help="Whole-stack GPU profiler for Python AI inference: Python line -> torch op -> CUDA call -> GPU kernel.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help (click's formatter): rich's help panels cost ~0.12 s of imports on every
    # `--help`; the help text uses no markup.
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        from zym.schemas.version import SCHEMA_VERSION

        try:
            v = version("zym")
        except PackageNotFoundError:  # run from a source tree without an install
            v = "unknown (not installed)"
        typer.echo(f"zym {v} (capture file schema v{SCHEMA_VERSION})")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print zym's version and exit.")) -> None:
    """Whole-stack GPU profiler for Python AI inference: Python line -> torch op -> CUDA call
    -> GPU kernel."""


def _register() -> None:
    from . import (
        analyze_cmd,
        capture_cmd,
        diff_cmd,
        export_cmd,
        fleet_cmd,
        import_cmd,
        mcp_cmd,
        report_cmd,
        rules_cmd,
        run_cmd,
        view_cmd,
    )

    for module in (import_cmd, analyze_cmd, diff_cmd, capture_cmd, run_cmd, export_cmd, report_cmd,
                   rules_cmd, view_cmd, fleet_cmd, mcp_cmd):
        module.register(app)


_register()

if __name__ == "__main__":
    app()
