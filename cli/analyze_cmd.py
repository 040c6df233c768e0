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
    top: Annotated[int | None, typer.Option("--top", "-n", min=1, help="Paths per ranking "
                                            "[default: 10 for text/markdown, all for json].")] = None,
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

    Exit codes: 0 ok, 1 a finding at or above --fail-on, 2 unusable input or rule pack.

    Example: zym analyze sample_traces/gpt_decode_server.trace.json.gz --top 5 --fail-on warning
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
        with stage_progress(progress) as say:
            result = run_analysis(file, say)
            findings = []
            if packs is not None:
                from zym.rules import evaluate

                say("applying rules")
                findings = evaluate(result, packs, disable or ())
        report = result.to_dict(top if top is not None or format is Format.json else 10)
        # Example events only for machines: people read the message, and it costs a join.
        examples = 5 if format is Format.json else 0
        report["findings"] = [f.to_dict(examples) for f in findings]
    if format is Format.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif format is Format.markdown:
        from .render import render_markdown

        sys.stdout.write(render_markdown(report))
    else:
        from rich.console import Console

        from .render import render_report

        render_report(report, Console())
    if fail_on is not FailOn.never:
        from zym.rules.model import SEVERITY_RANK

        worst = [f for f in findings if SEVERITY_RANK[f.severity] >= SEVERITY_RANK[fail_on.value]]
        if worst:
            print(f"zym: {len(worst)} finding(s) at or above {fail_on.value} "
                  f"(--fail-on {fail_on.value})", file=sys.stderr)
            raise typer.Exit(EXIT_FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
