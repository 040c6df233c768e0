"""What `zym analyze` and `zym diff` do once their command line is parsed, without typer.

The typer commands (cli/analyze_cmd.py, cli/diff_cmd.py) declare the options and call these;
the console script (cli/entry.py, through cli/fast.py) calls them directly for the command
lines it parses itself, without importing typer, click or pydantic (~0.25-0.3 s of a small
analysis). Each returns the exit code: 0, 1 (--fail-on / --fail-on-regression matched),
2 (unusable input, said in one line on stderr), 130 (interrupted), 143 (terminated).
"""
from __future__ import annotations

import errno
import sys
from collections.abc import Sequence
from pathlib import Path

from zym.schemas.errors import InputError, ZymError

from .errors import EXIT_BAD_INPUT, exit_code

EXIT_FINDINGS = 1  # --fail-on matched: the report was printed, and CI should fail
EXIT_REGRESSION = 1  # --fail-on-regression: GPU or wall time per step got worse by more than PCT


def print_json(value: object) -> None:
    """``value`` on stdout as JSON indented by one space, and a newline, in pieces
    (:mod:`zym.analysis.export.jsontext`: the json module's layout and values, text as
    UTF-8)."""
    from zym.analysis.export.jsontext import json_chunks

    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text-only stream (a test's capture): its own encoding
        sys.stdout.write(b"".join(json_chunks(value)).decode() + "\n")
        return
    sys.stdout.flush()
    for chunk in (*json_chunks(value), b"\n"):
        # A write that a reader's leaving (`| head`) cut short returns what it wrote: the
        # next one raises the broken pipe, which the command then reports as such.
        view = memoryview(chunk)
        while view:
            taken = buffer.write(view)
            if not taken:  # a stream that takes nothing (non-blocking, full): not lost silently
                raise BlockingIOError(errno.EAGAIN, "stdout took no more of the report")
            view = view[taken:]
    buffer.flush()


def analyze(file: Path, fmt: str = "text", top: int | None = None, window: str = "steady",
            what_if: Sequence[str] = (), rules: Sequence[Path] = (),
            disable: Sequence[str] = (), no_rules: bool = False, fail_on: str = "never",
            progress: bool = True, memory_budget: str | None = None) -> int:
    """`zym analyze`: the report on stdout in ``fmt``; the exit code."""
    try:
        found = _analyze(file, fmt, top, window, what_if, rules, disable, no_rules, fail_on,
                         progress, memory_budget)
    except (ZymError, KeyboardInterrupt) as e:
        return exit_code(e)
    report, findings, shown = found
    if fmt == "json":
        print_json(report)
    elif fmt == "markdown":
        from .render import render_markdown

        sys.stdout.write(render_markdown(report, shown))
    else:
        from .render import console_for_stdout, render_report

        render_report(report, console_for_stdout(), shown)
    if fail_on != "never":
        from zym.rules.model import SEVERITY_RANK

        worst = [f for f in findings or [] if SEVERITY_RANK[f.severity]
                 >= SEVERITY_RANK[fail_on]]
        if worst:
            print(f"zym: {len(worst)} finding(s) at or above {fail_on} "
                  f"(--fail-on {fail_on})", file=sys.stderr)
            return EXIT_FINDINGS
    return 0


def _analyze(file: Path, fmt: str, top: int | None, window: str, what_if: Sequence[str],
             rules: Sequence[Path], disable: Sequence[str], no_rules: bool, fail_on: str,
             progress: bool, memory_budget: str | None = None
             ) -> tuple[dict, list | None, int | None]:
    """The report of ``file``, its findings and how many rows it shows per ranking."""
    from zym.analysis import analyze as run_analysis

    from .progress import stage_progress

    if no_rules and fail_on != "never":  # it could never fail: say so, not exit 0
        raise InputError(f"--fail-on {fail_on} needs the rules: drop --no-rules")
    budget = budget_bytes(memory_budget)
    packs = None
    if not no_rules:
        from zym.rules import load_packs

        packs = load_packs(rules)
    if what_if and packs is None:
        raise InputError("--what-if needs the rules (finding numbers, fix models): drop "
                         "--no-rules")
    with stage_progress(progress) as say:
        # (the default budget samples a capture that would not fit, in at most 1 GiB; which
        # traces are imported out of core stays the default rule unless a budget was given)
        result = run_analysis(file, say, window, budget, memory_budget is not None)
        findings = None
        if packs is not None:
            from zym.rules import evaluate

            findings = evaluate(result, packs, disable, progress=say)
        replays = None
        if what_if:
            from zym.rules.whatif import what_if as replay

            say("replaying --what-if")
            replays = replay(result, findings, list(what_if))
    from zym.analysis.export.summary import build_report

    shown = top if top is not None or fmt == "json" else 10
    # Example events only for machines: people read the message, and it costs a join.
    report = build_report(result, findings, shown, 5 if fmt == "json" else 0, replays)
    return report, findings, shown


def budget_bytes(memory_budget: str | None, share: int = 1) -> int:
    """The bytes of memory each of ``share`` analyses held at once may use: ``--memory-budget``
    split among them, or by default half the memory available for each (a capture that
    would take more is sampled); a one-line error where the option is not a size."""
    from zym.analysis.budget import available_budget
    from zym.capture.kineto_stream import parse_size

    if memory_budget is None:
        return available_budget()
    try:
        return parse_size(memory_budget) // max(share, 1)
    except ValueError as e:
        raise InputError(f"--memory-budget: {e}") from None


def diff(before: Path, after: Path, fmt: str = "text", top: int | None = None,
         window: str = "steady", fail_on_regression: float | None = None,
         repeat: Path | None = None, host_noise: float | None = None,
         rules: Sequence[Path] = (), disable: Sequence[str] = (), no_rules: bool = False,
         jobs: int = 2, progress: bool = True, memory_budget: str | None = None) -> int:
    """`zym diff`: the comparison on stdout in ``fmt``; the exit code."""
    from zym.analysis.export.diff import finish_diff, render_markdown, render_text, start_profile

    from .progress import stage_progress

    try:  # a given budget is shared: with two jobs the captures are analysed at once
        budget = budget_bytes(memory_budget, jobs)
    except ZymError as e:
        return exit_code(e)
    args = {"window": window, "rules": not no_rules, "rule_paths": tuple(rules),
            "disabled": tuple(disable), "budget": budget,
            "budget_given": memory_budget is not None}
    try:
        # The baseline goes to a forked child first, before the spinner starts a thread (the
        # rule packs are loaded once, before the fork).
        pending = start_profile(before, jobs, **args)
        with stage_progress(progress) as say:
            from zym.analysis.diff import HOST_FLOOR

            floor = HOST_FLOOR if host_noise is None else host_noise / 100
            result = finish_diff(pending, after, say, repeat, floor)
    except (ZymError, KeyboardInterrupt) as e:
        return exit_code(e)
    shown = top if top is not None or fmt == "json" else 10
    d = result.to_dict(shown)
    if fmt == "json":
        print_json(d)
    elif fmt == "markdown":
        sys.stdout.write(render_markdown(d))
    else:
        sys.stdout.write(render_text(d))
    if fail_on_regression is None:
        return 0
    if d["per"] != "step":  # GPU time per second is a busy share, not a cost: no verdict
        print("zym: error: --fail-on-regression compares per-step figures, and "
              f"{'BEFORE' if d['before']['unit'] != 'step' else 'AFTER'} has no repeated "
              "step (see --window)", file=sys.stderr)
        return EXIT_BAD_INPUT
    worse = {m: pct for m, pct in d["regression_pct"].items()
             if pct is not None and pct > fail_on_regression}
    if worse:
        what = ", ".join(f"{'GPU time' if m == 'gpu_ns' else 'wall time'} +{pct:.1f}%"
                         for m, pct in worse.items())
        print(f"zym: regression per {d['per']}: {what} (--fail-on-regression "
              f"{fail_on_regression:g})", file=sys.stderr)
        return EXIT_REGRESSION
    return 0
