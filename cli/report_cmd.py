"""`zym report FILE -o report.html`: one self-contained page to share a capture's findings."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .errors import exit_on_error
from .options import memory_budget_option


def report(
    file: Annotated[Path, typer.Argument(help="A zym capture (.parquet) or a torch.profiler trace "
                                              "(.json, .json.gz).", show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="HTML file to write (a missing "
                                                                "folder is created).")
                      ] = Path("report.html"),
    top: Annotated[int, typer.Option("--top", "-n", min=1, help="Call paths per ranking.")] = 15,
    findings: Annotated[bool, typer.Option(help="Run the rules and show their findings.")] = True,
    baseline: Annotated[Path | None, typer.Option(
        "--baseline", "-b", help="Compare with this capture (as zym diff BASELINE FILE does) in "
        "a section of the report.", show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUTPUT if it exists.")] = False,
    progress: Annotated[bool, typer.Option(help="Show progress on stderr.")] = True,
    memory_budget: Annotated[str | None, memory_budget_option(
        "the analysis may use (e.g. 1G, 512M), shared with --baseline's", "the report",
        each=True)] = None,
) -> None:
    """Write an HTML report: summary, findings with their sites and evidence, top call paths and
    an interactive GPU-time flamegraph. It needs no network to open.

    Example: zym report sample_traces/gpt_decode_server.trace.json.gz -o report.html

    Example: zym report after.parquet --baseline before.parquet -o report.html
    """
    from zym.analysis.export.html_report import write_report
    from zym.analysis.export.source import load_export_source
    from zym.schemas.output import atomic_output, display

    from .bodies import budget_bytes
    from .progress import stage_progress

    with exit_on_error(), atomic_output(output, force) as tmp, stage_progress(progress) as say:
        # (held together: the report's analysis and its baseline's share a given budget)
        budget = budget_bytes(memory_budget, 1 if baseline is None else 2)
        given = memory_budget is not None
        src = load_export_source(file, say, with_findings=findings, budget=budget,
                                 budget_given=given, with_spans=False)
        diff = None
        if baseline is not None:
            from zym.analysis.export.diff import diff_with_baseline

            say("comparing with the baseline")
            diff = diff_with_baseline(src, baseline, budget=budget,
                                      budget_given=given).to_dict(top)
        say("writing report")
        size = write_report(src, tmp, top, diff)
    typer.echo(f"wrote {display(output)} ({size / 1e3:.0f} kB, {len(src.findings)} findings); "
               "open it in any browser")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
