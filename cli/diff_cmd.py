"""`zym diff BEFORE AFTER`: what changed between two captures, per step, above noise. The
options are declared here; cli/bodies.py does the work (and cli/fast.py parses the common
command lines without typer)."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from .options import memory_budget_option


class Format(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"


def diff(
    before: Annotated[Path, typer.Argument(help="The baseline: a zym capture (.parquet) or a "
                                                "torch.profiler trace (.json, .json.gz).",
                                           show_default=False)],
    after: Annotated[Path, typer.Argument(help="The capture to compare with it (any producer).",
                                          show_default=False)],
    format: Annotated[Format, typer.Option("--format", "-f", help="text for people, json for "
                                           "machines, markdown for a PR comment.")] = Format.text,
    top: Annotated[int | None, typer.Option("--top", "-n", min=1, help=(
        "Sites and GPU operations listed [default: 10 for text/markdown, all for json]."))
    ] = None,
    window: Annotated[str, typer.Option("--window", "-w", help=(
        "The part of each capture compared: steady, all, FROM:TO or steps:A:B (as zym "
        "analyze)."))] = "steady",
    fail_on_regression: Annotated[float | None, typer.Option(
        "--fail-on-regression", min=0.0, metavar="PCT", help=(
            "Exit 1 when GPU time or wall time per step got worse by more than PCT percent "
            "(for CI; both captures need repeated steps, else exit 2)."))] = None,
    repeat: Annotated[Path | None, typer.Option(
        "--repeat", help=("A second capture of BEFORE's code (another run): its difference "
                          "from BEFORE is the run-to-run noise of every measure."),
        show_default=False)] = None,
    # default None, not zym.analysis.diff.HOST_FLOOR: importing the analysis here would load
    # polars for every zym command (~0.3 s); tests/cli check that the help says its value
    host_noise: Annotated[float | None, typer.Option(
        "--host-noise", min=0.0, max=100.0, metavar="PCT", show_default=False, help=(
            "Without --repeat: changes of wall time and CPU blocked time under PCT% are noise "
            "(the CPU side of a process runs at the host's speed of the moment). Default 60."))
    ] = None,
    rules: Annotated[list[Path] | None, typer.Option(
        "--rules", "-r", help="Extra rule pack (YAML file or folder); repeatable.")] = None,
    disable: Annotated[list[str] | None, typer.Option(
        "--disable", help="Turn off a rule id (or a whole pack); repeatable.")] = None,
    no_rules: Annotated[bool, typer.Option("--no-rules", help="Skip the rule packs (no "
                                                              "findings compared).")] = False,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, max=2, help=(
        "Analyze the two captures at once (2) or one after the other (1)."))] = 2,
    progress: Annotated[bool, typer.Option(help="Show load progress on stderr.")] = True,
    memory_budget: Annotated[str | None, memory_budget_option(
        "the analyses may use together (e.g. 2G; half each with --jobs 2)", "the comparison",
        each=True)] = None,
) -> None:
    """Compare two captures: call sites and GPU operations matched across them (robust to lines
    moved by unrelated edits), GPU time, CPU time blocked, syncs, copies and bytes per step
    (per second where a capture has no repeated step), which changes are above noise, and the
    findings that appeared, disappeared or changed.

    A change is above noise when it exceeds the spread of its measure from step to step
    (3 standard errors of the difference of the means, and 2%); wall and CPU blocked time
    also need --host-noise, or the difference between BEFORE and a --repeat of it.

    Exit codes: 0 ok, 1 --fail-on-regression exceeded, 2 unusable input or rule pack.

    Example: zym diff before.trace.json.gz after.parquet --format markdown

    Example: zym diff main.parquet pr.parquet --fail-on-regression 5

    Example: zym diff base-a.parquet fixed.parquet --repeat base-b.parquet
    """
    from . import bodies

    code = bodies.diff(before, after, format.value, top, window, fail_on_regression, repeat,
                       host_noise, rules or (), disable or (), no_rules, jobs, progress,
                       memory_budget)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("diff")(diff)
