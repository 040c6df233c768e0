"""`zym view FILE`: open a capture's timeline in the Perfetto UI, served from this machine."""
from __future__ import annotations

import tempfile
import webbrowser
from pathlib import Path
from typing import Annotated

import typer

from .errors import exit_on_error


def view(
    file: Annotated[Path, typer.Argument(help="A zym capture (.parquet), a torch.profiler trace "
                                              "(.json, .json.gz) or a Perfetto trace (.pftrace).",
                                         show_default=False)],
    browser: Annotated[bool, typer.Option(help="Open the Perfetto UI in a browser; with "
                                               "--no-browser, print its URL.")] = True,
    port: Annotated[int, typer.Option(help="Loopback port. The Perfetto UI only fetches from "
                                           "127.0.0.1:9001; use another only for other clients.",
                                      min=0, max=65535)] = 9001,
    findings: Annotated[bool, typer.Option(help="Put rule findings on a track.")] = True,
    progress: Annotated[bool, typer.Option(help="Show progress on stderr.")] = True,
) -> None:
    """Export FILE to Perfetto if needed, serve it on 127.0.0.1 and open ui.perfetto.dev on it.

    The trace never leaves this machine: the UI runs in the browser and fetches it from the
    loopback server. Stop with Ctrl-C.

    Example: zym view sample_traces/gpt_decode_server.trace.json.gz --no-browser
    """
    from zym.analysis.export.serve import TraceServer, is_perfetto_trace
    from zym.schemas.output import display, terminate_as_exception

    from .progress import stage_progress

    # SIGTERM raises inside, so the temporary folder is removed on the way out.
    with exit_on_error(), terminate_as_exception(), \
            tempfile.TemporaryDirectory(prefix="zym-view-") as tmp:
        if not file.is_file():  # a FIFO or device would block the first read forever
            from zym.schemas.errors import InputError

            raise InputError(f"{display(file)}: " + (
                "no such file" if not file.exists() else "not a regular file"))
        trace = file
        if not is_perfetto_trace(file):
            from zym.analysis.export.perfetto import export_perfetto
            from zym.analysis.export.source import load_export_source
            from zym.schemas.io import is_parquet, open_capture

            if is_parquet(file):  # one line, not a process killed for memory
                from zym.analysis.export.perfetto import check_timeline_fits

                check_timeline_fits(open_capture(file), "export a part of it (zym export FILE "
                                    "--window FROM:TO -o part.pftrace) and view that")
            with stage_progress(progress) as say:
                src = load_export_source(file, say, with_findings=findings, timeline_only=True)
                say("writing Perfetto trace")
                name = file.name.removesuffix(".gz").removesuffix(".json").removesuffix(".parquet")
                trace = export_perfetto(src, Path(tmp) / f"{name}.pftrace").path
        from zym.analysis.export.perfetto import ui_size_note

        if (note := ui_size_note(trace.stat().st_size, display(trace))) is not None:
            kept = "" if trace == file else (
                " (this one is a temporary export: zym export FILE -o trace.pftrace keeps it)")
            typer.echo(note + kept + "; stop this first: both serve on 127.0.0.1:9001",
                       err=True)
        server = TraceServer(trace, port=port)
        typer.echo(f"serving {trace.name} on {server.trace_url} (loopback only); Ctrl-C to stop")
        if browser and webbrowser.open_new_tab(server.ui_url):
            typer.echo(f"opened {server.ui_url}")
        else:
            typer.echo(f"open this URL in a browser: {server.ui_url}")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            typer.echo("stopped", err=True)
        finally:
            server.httpd.server_close()


def register(app: typer.Typer) -> None:
    app.command("view")(view)
