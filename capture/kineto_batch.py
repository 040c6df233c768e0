"""Several torch.profiler traces at once: a folder of per-rank traces, or a list of files, each
imported into its own capture (one per rank), in one folder.

Each trace is imported on its own (streamed, in bounded batches, see ``kineto_json``), so the
memory a run needs is that of its largest trace, not of all of them; each capture is written
atomically (``zym.schemas.output``), so a trace that fails leaves the captures already
written intact and names the one that failed.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from zym.schemas.errors import InputError
from zym.schemas.output import check_target, display

# What a trace file's name ends with (torch.profiler writes ``*.pt.trace.json[.gz]``).
TRACE_SUFFIXES = (".json", ".json.gz")


def trace_files(inputs: Sequence[Path]) -> list[Path]:
    """The trace files named by ``inputs``: files as given, and each folder's ``*.json`` and
    ``*.json.gz`` files (not its subfolders), in name order."""
    found: list[Path] = []
    for path in inputs:
        if path.is_dir():
            inside = sorted(p for p in path.iterdir()
                            if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
            if not inside:
                raise InputError(f"{display(path)}: a folder with no .json or .json.gz trace")
            found += inside
        elif path.exists():
            found.append(path)
        else:
            raise InputError(f"{display(path)}: no such file")
    if len(set(map(Path.resolve, found))) != len(found):
        raise InputError("the same trace is named twice")
    return found


def capture_name(trace: Path) -> str:
    """``rank3.pt.trace.json.gz`` -> ``rank3.pt.trace.parquet``."""
    name = trace.name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return f"{name}.parquet"


def import_many(inputs: Sequence[Path], out_dir: Path, progress: Callable[[str], None] | None
                = None, force: bool = False, budget: int | None = None) -> list[Path]:
    """Import every trace of ``inputs`` (files or folders of them) into ``out_dir``, one capture
    per trace named after it, each in about ``budget`` bytes (``import_kineto``); returns the
    captures written, in input order."""
    from .kineto import import_kineto

    traces = trace_files(inputs)
    outs = [out_dir / capture_name(t) for t in traces]
    if len(set(outs)) != len(outs):
        raise InputError("two traces would write the same capture name (e.g. a.json and "
                         "a.json.gz): import them into different folders")
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{display(out_dir)}: several traces need an output folder, and this "
                         "is a file")
    for out in outs:  # every target checked before the first import
        check_target(out, force)
    written = []
    for i, (trace, out) in enumerate(zip(traces, outs), 1):
        def say(stage: str, i: int = i, trace: Path = trace) -> None:
            if progress:
                progress(f"[{i}/{len(traces)}] {display(trace.name)}: {stage}")

        written.append(import_kineto(trace, out, say, force=force, budget=budget))
    return written
