"""`zym analyze FILE`: the call paths of a capture, ranked by GPU time and by CPU time blocked."""
from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from .errors import exit_on_error


class Format(str, Enum):
    text = "text"
    json = "json"


def analyze(
    file: Annotated[Path, typer.Argument(help="A zym capture (.parquet) or a torch.profiler trace "
                                              "(.json, .json.gz).", show_default=False)],
    format: Annotated[Format, typer.Option("--format", "-f", help="text for people, json for "
                                                                  "machines.")] = Format.text,
    top: Annotated[int | None, typer.Option("--top", "-n", min=1, help="Paths per ranking "
                                            "[default: 10 for text, all for json].")] = None,
    progress: Annotated[bool, typer.Option(help="Show load progress on stderr.")] = True,
) -> None:
    """Attribute every GPU operation and CUDA call to its call path, Python line to kernel.

    Example: zym analyze sample_traces/gpt_decode_server.trace.json.gz --top 5
    """
    from zym.analysis import analyze as run_analysis

    from .progress import stage_progress

    with exit_on_error():
        with stage_progress(progress) as say:
            result = run_analysis(file, say)
        report = result.to_dict(top if top is not None or format is Format.json else 10)
    if format is Format.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    from rich.console import Console

    from .render import render_report

    render_report(report, Console())


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
