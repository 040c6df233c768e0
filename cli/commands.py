"""What `zym --help` lists: the program's description and each command's one-line summary, in
the order shown. Stdlib only: the console script renders the top-level help from this table
without importing typer (cli/entry.py); cli/main.py registers the commands from it, so the two
helps cannot differ (tests/cli/test_entry.py renders both)."""
from __future__ import annotations

from typing import NamedTuple

DESCRIPTION = ("Whole-stack GPU profiler for Python AI inference: Python line -> torch op -> CUDA "
               "call -> GPU kernel.")


class Command(NamedTuple):
    name: str
    module: str  # cli/<module>.py, whose register(app) adds the command
    summary: str  # the line `zym --help` shows for it
    group: bool = False  # a typer sub-app: click lists these after the plain commands


COMMANDS: tuple[Command, ...] = (
    Command("import", "import_cmd", "Convert torch.profiler traces into zym captures."),
    Command("analyze", "analyze_cmd", "Findings ranked by what fixing them saves, and call paths."),
    Command("diff", "diff_cmd", "Compare two captures: what changed per step, above noise."),
    Command("capture", "capture_cmd", "Capture a Python process's CUDA calls and GPU work."),
    Command("run", "run_cmd", "Run a program with zym's dormant agent, to capture it later."),
    Command("export", "export_cmd", "Export a capture: Perfetto, flamegraph, speedscope, pprof."),
    Command("report", "report_cmd", "Write a capture's findings as one HTML page."),
    Command("view", "view_cmd", "Open a capture's timeline in the Perfetto UI."),
    Command("mcp", "mcp_cmd", "Serve analyses and findings to coding agents (MCP)."),
    Command("rules", "rules_cmd", "Browse, check, test and write rule packs.", group=True),
    Command("fleet", "fleet_cmd", "Many captures in one ClickHouse store.", group=True),
)
