"""`zym analyze` and `zym diff` without typer: the console script (cli/entry.py) parses their
common command lines here and runs cli/bodies.py directly. typer 0.29 converts parameters
through pydantic: typer, click and pydantic cost ~0.25-0.3 s of a `zym analyze` that takes
~1 s in all (docs/benchmarks.md, "Small analyses").

The options are those cli/analyze_cmd.py and cli/diff_cmd.py declare for the typer app, which
serves every command line this parser does not take exactly: `--help`, a misspelt or malformed
option, a value out of range or not a plain decimal number, `--`, joined short options
(`-fjson`), shell completion. There typer runs and says what is wrong, as before.
tests/cli/test_fast.py checks that each line taken here gives the parameters click gives it,
and that the two paths print the same.
"""
from __future__ import annotations

import errno
import os
import re
import sys
from pathlib import Path
from typing import NamedTuple


class Opt(NamedTuple):
    param: str  # the body's parameter
    kind: str  # "str", "path", "int", "float", "choice", "multi-str", "multi-path", "flag"
    choices: tuple[str, ...] = ()
    low: float | None = None  # range, inclusive (click's min/max)
    high: float | None = None
    flag_value: bool = True
    dash_ok: bool = False  # a value may start with "-" (fleet's relative times: -7d)


_FORMAT = ("text", "json", "markdown")
_COMMON = {
    "--format": Opt("fmt", "choice", _FORMAT), "-f": Opt("fmt", "choice", _FORMAT),
    "--top": Opt("top", "int", low=1), "-n": Opt("top", "int", low=1),
    "--window": Opt("window", "str"), "-w": Opt("window", "str"),
    "--rules": Opt("rules", "multi-path"), "-r": Opt("rules", "multi-path"),
    "--disable": Opt("disable", "multi-str"),
    "--no-rules": Opt("no_rules", "flag"),
    "--progress": Opt("progress", "flag"), "--no-progress": Opt("progress", "flag",
                                                                flag_value=False),
}
OPTIONS: dict[str, dict[str, Opt]] = {  # command -> option name -> what it sets
    "analyze": _COMMON | {
        "--what-if": Opt("what_if", "multi-str"),
        "--fail-on": Opt("fail_on", "choice", ("info", "warning", "error", "never")),
        "--memory-budget": Opt("memory_budget", "str"),
    },
    "diff": _COMMON | {
        "--fail-on-regression": Opt("fail_on_regression", "float", low=0.0),
        "--repeat": Opt("repeat", "path"),
        "--host-noise": Opt("host_noise", "float", low=0.0, high=100.0),
        "--jobs": Opt("jobs", "int", low=1, high=2), "-j": Opt("jobs", "int", low=1, high=2),
        "--memory-budget": Opt("memory_budget", "str"),
    },
}
POSITIONAL = {"analyze": ("file",), "diff": ("before", "after")}
DEFAULTS: dict[str, dict] = {
    "analyze": {"fmt": "text", "top": None, "window": "steady", "what_if": (), "rules": (),
                "disable": (), "no_rules": False, "fail_on": "never", "progress": True,
                "memory_budget": None},
    "diff": {"fmt": "text", "top": None, "window": "steady", "fail_on_regression": None,
             "repeat": None, "host_noise": None, "rules": (), "disable": (), "no_rules": False,
             "jobs": 2, "progress": True, "memory_budget": None},
}
_INT = re.compile(r"[0-9]+")
_FLOAT = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def _value(opt: Opt, text: str):
    """``text`` converted as click converts it, or None where this parser leaves the line to
    typer (a value it might convert otherwise, or one click refuses)."""
    if not text or (text.startswith("-") and not opt.dash_ok):
        return None  # empty, or an option name where a value belongs: typer decides
    if opt.kind in ("str", "multi-str"):
        return text
    if opt.kind in ("path", "multi-path"):
        return Path(text)
    if opt.kind == "choice":
        return text if text in opt.choices else None
    pattern, convert = (_INT, int) if opt.kind == "int" else (_FLOAT, float)
    if not pattern.fullmatch(text):
        return None
    value = convert(text)
    if (opt.low is not None and value < opt.low) or (opt.high is not None and value > opt.high):
        return None
    return value


def parse_line(names: dict[str, Opt], args: list[str]) -> tuple[dict, list[str]] | None:
    """The options of ``args`` as their parameters (``names``: option -> ``Opt``) and the
    positional arguments, as click parses them; None when this parser does not take the line
    exactly (the typer app then answers it). Shared with cli/fleet_fast.py."""
    out: dict = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        name, eq, text = arg.partition("=")
        opt = names.get(name)
        if opt is None or (eq and not name.startswith("--")):
            return None
        if opt.kind == "flag":
            if eq:
                return None  # click: a flag takes no value
            out[opt.param] = opt.flag_value
            continue
        if not eq:
            if i >= len(args):
                return None
            text = args[i]
            i += 1
        value = _value(opt, text)
        if value is None:
            return None
        if opt.kind.startswith("multi-"):
            out[opt.param] = (*out.get(opt.param, ()), value)
        else:  # click keeps the last value given
            out[opt.param] = value
    return out, positional


def parse(command: str, args: list[str]) -> dict | None:
    """The body's parameters for ``zym COMMAND ARGS``, or None when this parser does not take
    the line exactly (the typer app then answers it)."""
    got = parse_line(OPTIONS[command], args)
    if got is None:
        return None
    out, positional = got
    if len(positional) != len(POSITIONAL[command]) or not all(positional):
        return None
    return DEFAULTS[command] | out | {k: Path(v) for k, v in zip(POSITIONAL[command],
                                                               positional)}


BLAS_THREADS = "OPENBLAS_NUM_THREADS"
DECODE_AHEAD = "ZYM_DECODE_AHEAD"


def _import_libraries() -> None:
    """Import numpy and polars, which every analysis needs, the cheaper way:

    * numpy with its OpenBLAS limited to one thread: OpenBLAS starts a thread per core as it
      loads (~0.05 s of numpy's ~0.15 s import on the 2-core development machine), and zym
      calls no BLAS routine (no matrix products). Only where the user set no limit; the
      variable is removed again, so nothing this process starts inherits it.
    * without the cyclic garbage collector, whose passes over the new modules' objects took
      ~0.035 s of these imports; the objects are then frozen (``gc.freeze``), so that later
      passes do not walk them again (a full pass over them: ~0.02 s). Imports make next to
      no cyclic garbage.
    """
    import gc

    if "polars" in sys.modules:
        return
    limit = BLAS_THREADS not in os.environ and "numpy" not in sys.modules
    enabled = gc.isenabled()
    gc.disable()
    try:
        if limit:
            os.environ[BLAS_THREADS] = "1"
        import numpy  # noqa: F401
        import polars  # noqa: F401
    finally:
        if limit:
            del os.environ[BLAS_THREADS]
        gc.freeze()
        if enabled:
            gc.enable()


def _decode_ahead(paths: list[Path]) -> None:
    """Small torch.profiler traces among ``paths`` decoded in forked processes while this one
    imports numpy and polars, where a core is free now (zym.capture.kineto_prefetch: ~0.1 s
    of a sample-sized trace's reading off the critical path). Before any import that starts
    a thread, so the forks are safe."""
    choice = os.environ.get(DECODE_AHEAD, "")  # "0": never; "1": even on a busy machine
    if choice == "0":
        return
    from zym.capture import kineto_prefetch

    if choice == "1" or kineto_prefetch.core_free():
        for path in paths:
            kineto_prefetch.start(path)


def run(command: str, args: list[str]) -> int | None:
    """Answer ``zym COMMAND ARGS``; the exit code, or None to leave the line to typer."""
    if command not in OPTIONS or "_ZYM_COMPLETE" in os.environ:
        return None
    params = parse(command, args)
    if params is None:
        return None
    try:
        _decode_ahead([params["file"]] if command == "analyze"
                      else [params["before"], params["after"]])
        _import_libraries()
        from . import bodies

        code = getattr(bodies, command)(**params)
        sys.stdout.flush()
    except KeyboardInterrupt as e:  # Ctrl-C where the body does not catch it (its imports):
        from .errors import exit_code  # its one line and exit code, not a traceback

        return exit_code(e)
    except OSError as e:  # `zym analyze ... | head`: as click does, quietly, exit 1
        if e.errno != errno.EPIPE:
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return code
