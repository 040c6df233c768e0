"""`zym export FILE --format perfetto|folded|speedscope|pprof`: timelines, flamegraphs and
profiles to files."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from .errors import exit_on_error


class ExportFormat(str, Enum):
    perfetto = "perfetto"
    folded = "folded"
    speedscope = "speedscope"
    pprof = "pprof"


class Weight(str, Enum):
    gpu = "gpu"
    stall = "stall"


SUFFIX = {ExportFormat.perfetto: ".pftrace", ExportFormat.folded: ".folded",
          ExportFormat.speedscope: ".speedscope.json", ExportFormat.pprof: ".pb.gz"}


def format_for(output: Path | None, given: ExportFormat | None) -> ExportFormat:
    """The export format: ``--format`` when given (an output name with another format's
    extension is refused: it would hold the wrong thing), else the output's extension, else
    Perfetto."""
    from zym.schemas.errors import InputError

    implied = None
    if output is not None:
        name = output.name.lower()
        implied = next((f for f, suffix in SUFFIX.items() if name.endswith(suffix)), None)
        if implied is None and name.endswith(".json"):
            implied = ExportFormat.speedscope
    if given is not None and implied is not None and given is not implied:
        raise InputError(f"{output}: the name says {implied.value} ({SUFFIX[implied]}) but "
                         f"--format is {given.value}; rename the output or drop --format")
    return given or implied or ExportFormat.perfetto


def default_output(file: Path, fmt: ExportFormat) -> Path:
    """``trace.json.gz`` -> ``trace.pftrace`` (in the current folder)."""
    name = file.name
    for ext in (".gz", ".json", ".parquet", ".trace"):
        name = name.removesuffix(ext)
    return Path(name + SUFFIX[fmt])


def export(
    file: Annotated[Path, typer.Argument(help="A zym capture (.parquet) or a torch.profiler trace "
                                              "(.json, .json.gz).", show_default=False)],
    format: Annotated[ExportFormat | None, typer.Option(
        "--format", "-f", help="perfetto: timeline for ui.perfetto.dev; folded: flamegraph.pl / "
        "speedscope stacks (integer ns); speedscope: speedscope JSON [default: from the output's "
        "extension (.pftrace, .folded, .speedscope.json), else perfetto].",
        show_default=False)] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="File to write [default: FILE's name with .pftrace, .folded or "
        ".speedscope.json, in the current folder]. A missing folder is created.",
        show_default=False)] = None,
    weight: Annotated[Weight, typer.Option(
        help="Folded stacks weighted by GPU time, or by CPU time blocked in CUDA calls (stall)."
    )] = Weight.gpu,
    findings: Annotated[bool, typer.Option(help="Run the rules and put their findings on a "
                                                "track (perfetto).")] = True,
    window: Annotated[str, typer.Option("--window", "-w", help=(
        "The part flamegraphs weigh and findings come from: steady, all, FROM:TO or "
        "steps:A:B (as zym analyze); a Perfetto timeline shows the whole capture, or with "
        "FROM:TO on a zym capture that part only (read a part at a time: any size)."))] = "steady",
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUTPUT if it exists.")] = False,
    progress: Annotated[bool, typer.Option(help="Show progress on stderr.")] = True,
) -> None:
    """Export a capture: a Perfetto timeline, a GPU-time flamegraph, or a pprof profile.

    Example: zym export sample_traces/gpt_decode_server.trace.json.gz -o trace.pftrace

    Example: zym export trace.parquet --format pprof -o gpu.pb.gz
    """
    from zym.schemas.io import is_parquet
    from zym.schemas.output import atomic_output, display

    from .progress import stage_progress

    with exit_on_error():
        format = format_for(output, format)
    out = output or default_output(file, format)
    with exit_on_error(), atomic_output(out, force) as tmp, stage_progress(progress) as say:
        if format is ExportFormat.perfetto:
            from zym.analysis.export.perfetto import export_perfetto, ui_size_note
            from zym.analysis.export.source import load_export_source

            source = file
            if is_parquet(file):
                from zym.schemas.io import open_capture

                cap = open_capture(file)
                if _time_range(window):  # that part only, read a part at a time
                    from zym.analysis.budget import capture_part

                    say("reading the part of the capture")
                    source, window = capture_part(cap, window), "all"
                else:  # one line, not a process killed for memory
                    from zym.analysis.export.perfetto import check_timeline_fits

                    check_timeline_fits(cap, "export a part of it with --window FROM:TO")
            src = load_export_source(source, say, with_findings=findings, window=window,
                                     timeline_only=True)
            say("writing Perfetto trace")
            stats = export_perfetto(src, tmp)
            summary = f"{stats.events:,} events, {stats.bytes / 1e6:.1f} MB"
            hint = ui_size_note(stats.bytes, display(out)) or f"open it with: zym view {display(out)}"
        else:
            from zym.analysis import analyze
            from zym.analysis.export.flamegraph import write_folded, write_speedscope

            analysis = analyze(file, say, window)
            if format is ExportFormat.pprof:
                from zym.analysis.export.pprof import write_pprof

                n = write_pprof(analysis, tmp)
                summary = f"{n:,} samples: GPU time and CPU time blocked, in ns"
                hint = "open it with go tool pprof, Pyroscope or Parca"
            elif format is ExportFormat.folded:
                n = write_folded(analysis, tmp, weight.value)
                summary = f"{n:,} stacks weighted by {weight.value} ns"
                hint = "render it with flamegraph.pl or https://www.speedscope.app"
            else:
                n = write_speedscope(analysis, tmp)
                summary = f"{n:,} stacks"
                hint = "open it at https://www.speedscope.app"
    typer.echo(f"wrote {display(out)} ({summary}); {hint}")


def _time_range(window: str) -> bool:
    """Whether ``--window`` names times (``FROM:TO``), not steps nor a phase."""
    spec = window.strip()
    return ":" in spec and not spec.startswith("steps:")


def register(app: typer.Typer) -> None:
    app.command("export")(export)
