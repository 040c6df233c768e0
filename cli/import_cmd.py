"""`zym import TRACE... -o OUT`: convert torch.profiler (Kineto) traces to zym captures."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .errors import exit_on_error


def import_trace(
    traces: Annotated[list[Path], typer.Argument(
        help="torch.profiler trace: .json or .json.gz; or several, or a folder of them (one "
             "per rank).", show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="Capture file to write; for "
                                         "several traces or a folder, the folder to write one "
                                         "capture per trace into (a missing folder is "
                                         "created).", show_default=False)],
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUTPUT if it exists.")] = False,
    progress: Annotated[bool, typer.Option(help="Show progress on stderr.")] = True,
    memory_budget: Annotated[str, typer.Option(
        "--memory-budget", metavar="SIZE",
        help="Memory the import may use (e.g. 512M, 2G): a trace whose events do not fit is "
             "spilled to disk beside the output and imported window by window.")] = "1G",
) -> None:
    """Convert a torch.profiler (Kineto) trace into one zym capture file (schema v4); several
    traces (or a folder of per-rank traces) into one capture each, in the folder OUTPUT.

    Example: zym import sample_traces/gpt_decode_server.trace.json.gz -o trace.parquet

    Example: zym import traces/ -o captures/
    """
    from zym.schemas.output import display

    from .progress import stage_progress

    with exit_on_error():
        from zym.capture.kineto_stream import parse_size
        from zym.schemas.errors import InputError

        try:
            budget = parse_size(memory_budget)
        except ValueError as e:
            raise InputError(f"--memory-budget: {e}") from None
        if len(traces) == 1 and not traces[0].is_dir():
            from zym.capture.kineto import import_kineto

            with stage_progress(progress) as say:
                out = import_kineto(traces[0], output, say, force=force, budget=budget)
            size = out.stat().st_size
            _say_cut_short([out])
            typer.echo(f"wrote {display(out)} ({size / 1e6:.1f} MB); next: zym analyze "
                       f"{display(out)}")
            return
        from zym.capture.kineto_batch import import_many

        with stage_progress(progress) as say:
            outs = import_many(traces, output, say, force=force, budget=budget)
        _say_cut_short(outs)
    size = sum(o.stat().st_size for o in outs)
    typer.echo(f"wrote {len(outs)} captures into {display(output)} ({size / 1e6:.1f} MB); "
               f"next: zym analyze {display(outs[0])}")


def _say_cut_short(outs: list) -> None:
    """A warning on stderr for each capture whose trace was cut short (its report says so
    too)."""
    from zym.analysis.export.summary import cut_short_line
    from zym.analysis.load import cut_short
    from zym.schemas.io import open_capture
    from zym.schemas.output import display

    for out in outs:
        cut = cut_short(open_capture(out).meta)
        if cut:
            typer.echo(f"zym: warning: {display(out)}: {cut_short_line(cut)}", err=True)


def register(app: typer.Typer) -> None:
    app.command("import")(import_trace)
