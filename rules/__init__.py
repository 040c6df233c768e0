"""zym's rule engine: declarative rule packs that name the problem, the line and its cost.

Usage (library)::

    from zym.analysis import analyze
    from zym import rules

    analysis = analyze("sample_traces/gpt_decode_server.trace.json.gz")
    for f in rules.evaluate(analysis):                 # built-in packs + entry points
        print(f.severity, f.rule_id, f.site, f.cost_ns, f.message)
        for occ in f.occurrences:                      # every offending event
            ...  # {pid, tid, ts_ns, dur_ns, correlation_id}

``evaluate(analysis, packs=None, disabled=()) -> list[Finding]``, most costly first.

* ``packs``: None for the built-in packs (``rules/packs/*.yaml``) plus those registered under
  the ``zym.rules`` entry-point group; otherwise a list of ``Pack`` objects or paths (a YAML
  file, or a folder of them). ``load_packs(paths, builtin=True)`` combines both.
* ``disabled``: rule ids (``syncs.scalar-readback``) or pack names (``compute``) to skip.

A ``Finding`` (``rules/findings.py``) carries ``rule_id``, ``severity`` ("info" | "warning" |
"error"), ``title``, ``message``, ``site`` (``file:line function``), ``site_id`` (stack node
in ``analysis.call_paths``), ``user_chain`` (user frames outermost first), ``evidence`` (dict:
count, stall_ns, worst_stall_ns, gpu_idle_ns, bytes, gpu_ns, gpu_share, ... and the rule's own
measures), ``fix``, ``cost_ns`` (the ranking key), and ``occurrences``: a list of dicts
``{pid, tid, ts_ns, dur_ns, correlation_id}``, one per offending event (CPU call times for call
and kernel rules, the gap for idle-gap rules), built lazily from ``occurrence_frame`` (polars).
``Finding.to_dict()`` is what ``zym analyze --format json`` prints under ``findings``.

An entry point in group ``zym.rules`` resolves to a path (str or ``Path``) of a pack file or a
folder of packs, a list of such paths, or a callable returning either; loading it imports the
providing package, never code from the YAML itself. The rule format is in ``docs/rules.md``
and ``schemas/rule.schema.json``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from zym.schemas.errors import ZymError

from .findings import Finding, Findings
from .model import Pack, Rule, RuleError, load_pack, parse_pack

if TYPE_CHECKING:
    from zym.analysis import Analysis

ENTRY_POINT_GROUP = "zym.rules"


def builtin_pack_paths() -> list[Path]:
    """The packs shipped with zym, in a stable order."""
    folder = resources.files("zym.rules").joinpath("packs")
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith((".yaml", ".yml")))


def pack_files(path: str | Path) -> list[Path]:
    """A pack file, or every ``*.yaml``/``*.yml`` in a folder (sorted)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
        if not files:
            raise RuleError(f"{path}: folder holds no rule packs (*.yaml)")
        return files
    if not path.exists():
        raise RuleError(f"{path}: no such rule pack")
    return [path]


def entry_point_paths() -> list[Path]:
    """Pack paths registered by installed packages under the ``zym.rules`` entry points."""
    from importlib.metadata import entry_points

    out: list[Path] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            target = ep.load()
            if callable(target):
                target = target()
        except Exception as e:  # a broken plugin names itself, it does not crash analyze
            raise RuleError(f"entry point {ep.name} ({ep.value}) in group {ENTRY_POINT_GROUP}: "
                            f"cannot load ({e})") from e
        items = target if isinstance(target, (list, tuple)) else [target]
        for item in items:
            out.extend(pack_files(item))
    return out


def load_packs(paths: Iterable[str | Path] = (), builtin: bool = True,
               plugins: bool = True) -> list[Pack]:
    """Built-in packs, entry-point packs and ``paths`` (files or folders), validated.

    Two packs with the same rule id are an error naming both files."""
    files: list[Path] = []
    if builtin:
        files += builtin_pack_paths()
    if plugins:
        files += entry_point_paths()
    for p in paths:
        files += pack_files(p)
    packs = [load_pack(f) for f in files]
    seen: dict[str, str] = {}
    for pack in packs:
        for rule in pack.rules:
            if rule.id in seen and seen[rule.id] != pack.source:
                raise RuleError(f"{pack.source}: rule {rule.id}: field id: already defined in "
                                f"{seen[rule.id]}")
            seen[rule.id] = pack.source
    return packs


def evaluate(analysis: Analysis, packs: Sequence[Pack | str | Path] | None = None,
             disabled: Iterable[str] = (), together: bool = True,
             progress: Callable[[str], None] | None = None) -> Findings:
    """Run rule packs over an analysis; findings most costly first (see module doc).
    ``together=False``: without the replay of every fix together (``Findings.total_ns`` and
    ``saving_incremental_ns`` stay None), for callers that read each finding's own saving.
    ``progress``: told each stage, and how many fixes have been replayed (from the replay
    threads too)."""
    from .engine import evaluate_rules, select_rules

    if packs is None:
        loaded = load_packs()
    else:
        loaded = []
        for p in packs:
            loaded += [p] if isinstance(p, Pack) else [load_pack(f) for f in pack_files(p)]
    rules = select_rules(loaded, disabled)
    try:
        return evaluate_rules(analysis, rules, together=together, progress=progress)
    except ZymError:   # a rule pack's error, or one zym raises on purpose (its own message)
        raise
    except Exception as e:  # noqa: BLE001 (a pack the checks missed: name it, no traceback)
        from .packcheck import run_against_engine

        for pack in loaded:  # find the rule: each alone, on this capture
            run_against_engine(dataclasses.replace(pack, rules=tuple(
                r for r in pack.rules if r in rules)), lambda rid, msg, src=pack.source:
                RuleError(f"{src}: rule {rid}: {msg}"), analysis)
        raise RuleError(f"the rule engine failed on this capture ({type(e).__name__}: "
                        f"{' '.join(str(e).split())[:200]})") from None


__all__ = ["ENTRY_POINT_GROUP", "Finding", "Pack", "Rule", "RuleError", "builtin_pack_paths",
           "evaluate", "load_pack", "load_packs", "pack_files", "parse_pack"]
