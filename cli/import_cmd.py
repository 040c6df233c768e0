"""`zym import TRACE -o OUT.parquet`: convert a torch.profiler (Kineto) trace to a zym capture."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .errors import exit_on_error


def import_trace(
    trace: Annotated[Path, typer.Argument(help="torch.profiler trace: .json or .json.gz.",
                                          show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="Capture file to write.",
                                         show_default=False)],
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUTPUT if it exists.")] = False,
    progress: Annotated[bool, typer.Option(help="Show progress on stderr.")] = True,
) -> None:
    """Convert a torch.profiler (Kineto) trace into one zym capture file (schema v1).

    Example: zym import sample_traces/gpt_decode_server.trace.json.gz -o trace.parquet
    """
    from zym.capture.kineto import import_kineto
    from zym.schemas.errors import InputError

    from .progress import stage_progress

    with exit_on_error():
        if output.exists() and not force:
            raise InputError(f"{output}: exists; pass --force to overwrite it")
        if not output.parent.exists():
            raise InputError(f"{output.parent}: no such folder for the output")
        with stage_progress(progress) as say:
            out = import_kineto(trace, output, say)
        typer.echo(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB); next: zym analyze {out}")


def register(app: typer.Typer) -> None:
    app.command("import")(import_trace)
