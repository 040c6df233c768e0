"""`zym analyze FILE`: findings first (ranked by cost), then the call paths ranked by GPU time
and by CPU time blocked."""
from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from .errors import exit_on_error

EXIT_FINDINGS = 1  # --fail-on matched: the report was printed, and CI should fail


class Format(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"


class FailOn(str, Enum):
    info = "info"
    warning = "warning"
    error = "error"
    never = "never"


def analyze(
    file: Annotated[Path, typer.Argument(help="A zym capture (.parquet) or a torch.profiler trace "
                                              "(.json, .json.gz).", show_default=False)],
    format: Annotated[Format, typer.Option("--format", "-f", help="text for people, json for "
                                           "machines, markdown for a PR or issue.")] = Format.text,
    top: Annotated[int | None, typer.Option("--top", "-n", min=1, help=(
        "Findings, kernels and call paths shown per ranking [default: 10 for text/markdown, "
        "all for json]."))] = None,
    window: Annotated[str, typer.Option("--window", "-w", help=(
        "What to analyze: steady (the repeated steps after startup and warm-up), all, "
        "FROM:TO from the capture's start (1.5s:3s, 200ms:), or steps:A:B."))] = "steady",
    what_if: Annotated[list[str] | None, typer.Option("--what-if", help=(
        "Replay the window with a fix and say what it saves: a finding number (3), all, a "
        "rule id, MODEL@FILE:LINE (batch, remove, unblock, pin, async, shorten-gaps), "
        "speedup@REGEX=4x|tf32, cuda-graph@steps; repeatable, also replayed together."))] = None,
    rules: Annotated[list[Path] | None, typer.Option(
        "--rules", "-r", help="Extra rule pack (YAML file or folder); repeatable.")] = None,
    disable: Annotated[list[str] | None, typer.Option(
        "--disable", help="Turn off a rule id (or a whole pack); repeatable.")] = None,
    no_rules: Annotated[bool, typer.Option("--no-rules", help="Skip the rule packs.")] = False,
    fail_on: Annotated[FailOn, typer.Option(
        "--fail-on", help="Exit 1 when a finding of this severity or worse fires (for CI).",
    )] = FailOn.never,
    progress: Annotated[bool, typer.Option(help="Show load progress on stderr.")] = True,
) -> None:
    """Name the problems of a capture (findings) and attribute every GPU operation and CUDA
    call to its call path, Python line to kernel.

    Findings are ranked by what fixing them would save: zym replays the capture's timeline
    with each fix applied. Startup and warm-up are reported apart (--window picks the part).

    Exit codes: 0 ok, 1 a finding at or above --fail-on, 2 unusable input or rule pack.

    Example: zym analyze sample_traces/gpt_decode_server.trace.json.gz --top 5 --fail-on warning

    Example: zym analyze trace.parquet --what-if 1 --what-if batch@serve.py:87
    """
    from zym.analysis import analyze as run_analysis

    from .progress import stage_progress

    with exit_on_error():
        if no_rules and fail_on is not FailOn.never:  # it could never fail: say so, not exit 0
            from zym.schemas.errors import InputError

            raise InputError(f"--fail-on {fail_on.value} needs the rules: drop --no-rules")
        packs = None
        if not no_rules:
            from zym.rules import load_packs

            packs = load_packs(rules or ())
        if what_if and packs is None:
            from zym.schemas.errors import InputError

            raise InputError("--what-if needs the rules (finding numbers, fix models): drop "
                             "--no-rules")
        with stage_progress(progress) as say:
            result = run_analysis(file, say, window)
            findings = None
            if packs is not None:
                from zym.rules import evaluate

                say("applying rules and replaying their fixes")
                findings = evaluate(result, packs, disable or ())
            replays = None
            if what_if:
                from zym.rules.whatif import what_if as replay

                say("replaying --what-if")
                replays = replay(result, findings, what_if)
        from zym.analysis.export.summary import build_report

        shown = top if top is not None or format is Format.json else 10
        # Example events only for machines: people read the message, and it costs a join.
        report = build_report(result, findings, shown, 5 if format is Format.json else 0,
                              replays)
    if format is Format.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif format is Format.markdown:
        from .render import render_markdown

        sys.stdout.write(render_markdown(report, shown))
    else:
        from .render import console_for_stdout, render_report

        render_report(report, console_for_stdout(), shown)
    if fail_on is not FailOn.never:
        from zym.rules.model import SEVERITY_RANK

        worst = [f for f in findings or [] if SEVERITY_RANK[f.severity]
                 >= SEVERITY_RANK[fail_on.value]]
        if worst:
            print(f"zym: {len(worst)} finding(s) at or above {fail_on.value} "
                  f"(--fail-on {fail_on.value})", file=sys.stderr)
            raise typer.Exit(EXIT_FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
