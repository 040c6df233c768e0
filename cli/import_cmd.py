"""`zym import TRACE -o OUT.parquet`: convert a torch.profiler (Kineto) trace to a zym capture."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .errors import exit_on_error


def import_trace(
    trace: Annotated[Path, typer.Argument(help="torch.profiler trace: .json or .json.gz.",
                                          show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="Capture file to write (a "
                                         "missing folder is created).", show_default=False)],
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUTPUT if it exists.")] = False,
    progress: Annotated[bool, typer.Option(help="Show progress on stderr.")] = True,
) -> None:
    """Convert a torch.profiler (Kineto) trace into one zym capture file (schema v2).

    Example: zym import sample_traces/gpt_decode_server.trace.json.gz -o trace.parquet
    """
    from zym.capture.kineto import import_kineto
    from zym.schemas.output import display

    from .progress import stage_progress

    with exit_on_error():
        with stage_progress(progress) as say:
            out = import_kineto(trace, output, say, force=force)
        size = out.stat().st_size
    typer.echo(f"wrote {display(out)} ({size / 1e6:.1f} MB); next: zym analyze {display(out)}")


def register(app: typer.Typer) -> None:
    app.command("import")(import_trace)
