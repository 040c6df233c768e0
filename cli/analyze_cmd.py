"""`zym analyze FILE`: findings first (ranked by cost), then the call paths ranked by GPU time
and by CPU time blocked. The options are declared here; cli/bodies.py does the work (and
cli/fast.py parses the common command lines without typer)."""
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
    memory_budget: Annotated[str | None, memory_budget_option(
        "the analysis may use (e.g. 1G, 512M)", "the report")] = None,
) -> None:
    """Name the problems of a capture (findings) and attribute every GPU operation and CUDA
    call to its call path, Python line to kernel.

    Findings are ranked by what fixing them would save: zym replays the capture's timeline
    with each fix applied. Startup and warm-up are reported apart (--window picks the part).

    Exit codes: 0 ok, 1 a finding at or above --fail-on, 2 unusable input or rule pack.

    Example: zym analyze sample_traces/gpt_decode_server.trace.json.gz --top 5 --fail-on warning

    Example: zym analyze trace.parquet --what-if 1 --what-if batch@serve.py:87
    """
    from . import bodies

    code = bodies.analyze(file, format.value, top, window, what_if or (), rules or (),
                          disable or (), no_rules, fail_on.value, progress, memory_budget)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
