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
    rich_markup_mode="rich",
)


def _register() -> None:
    from . import analyze_cmd, capture_cmd, export_cmd, import_cmd, report_cmd, rules_cmd, view_cmd

    for module in (import_cmd, analyze_cmd, capture_cmd, export_cmd, report_cmd, rules_cmd,
                   view_cmd):
        module.register(app)


_register()

if __name__ == "__main__":
    app()
