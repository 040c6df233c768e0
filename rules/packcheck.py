"""Checks that make ``zym rules lint`` and loading a pack as strict as running it.

* ``check_yaml_bounds``: before a pack is built, its YAML event stream is scanned once: at
  most ``MAX_PACK_BYTES`` of text, ``MAX_NESTING`` levels, and ``MAX_NODES`` nodes once aliases
  are expanded. An alias bomb ("billion laughs") or a self-referencing alias is refused in time
  linear in the text, before anything walks the expanded tree.
* ``polars_regex_problem``: rules run their regular expressions in polars (Rust's ``regex``
  crate), which lacks look-around and back-references that Python's ``re`` accepts; a pattern
  is checked by the engine that will run it.
* ``run_against_engine``: every rule of a pack is run by the rule engine itself on a small
  synthetic capture (``zym.rules.testing.CaptureBuilder``: kernels, copies, syncs, scalar
  read-backs, idle gaps), once as written and once with its ``where`` and ``having`` lifted so
  that it fires and every template is rendered with real values. Type errors (a numeric
  comparison on a text column, ``{name:pct}`` on a name) surface here as a ``RuleError``
  naming the rule, not as a traceback in ``zym analyze``.
"""
from __future__ import annotations

import dataclasses
import functools
import tempfile
from collections.abc import Callable
from pathlib import Path

MAX_PACK_BYTES = 1 << 20
MAX_NESTING = 64
MAX_NODES = 100_000


def check_yaml_bounds(text: str, fail: Callable[[str], Exception]) -> None:
    """Raise ``fail(message)`` when the YAML is too large, too deep or expands too far."""
    import yaml

    if len(text) > MAX_PACK_BYTES:
        raise fail(f"larger than {MAX_PACK_BYTES >> 10} KiB; a rule pack is a few kB")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    sizes: dict[str, int] = {}  # anchor -> values in its expanded node
    open_: list[tuple[str | None, int]] = []  # open collections: (anchor, count at start)
    total = 0  # values so far, aliases expanded
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                if event.anchor not in sizes:  # an alias inside its own anchor: a cycle
                    raise fail(f"alias *{event.anchor} refers to a collection that contains it")
                total += sizes[event.anchor]
            elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                open_.append((event.anchor, total))
                total += 1
                if len(open_) > MAX_NESTING:
                    raise fail(f"nested deeper than {MAX_NESTING} levels")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                anchor, before = open_.pop()
                if anchor is not None:
                    sizes[anchor] = total - before
            elif isinstance(event, yaml.ScalarEvent):
                total += 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
            if total > MAX_NODES:
                raise fail(f"more than {MAX_NODES:,} values once aliases are expanded "
                           "(an alias bomb?)")
    except yaml.YAMLError:
        return  # the loader reports it, with its position


def polars_regex_problem(pattern: str) -> str | None:
    """Why polars cannot run ``pattern`` (None when it can)."""
    import polars as pl

    try:
        pl.Series([""], dtype=pl.String).str.contains(pattern)
    except pl.exceptions.PolarsError as e:
        text = " ".join(str(e).split())
        cause = text.split("error: ", 1)[1] if "error: " in text else "rejected"
        return cause.split(" This error occurred")[0][:160]
    return None


@functools.lru_cache(maxsize=1)
def _probe_analysis():
    """The analysis of a small synthetic capture on which every relation has rows."""
    from zym.analysis import analyze

    from .testing import CaptureBuilder

    b = CaptureBuilder()
    outer = [("python", "serve", "app.py", 10), ("python", "step", "app.py", 20)]
    with b.enclosing(outer):
        for i in range(4):
            b.kernel(outer + [("torch_op", "aten::mm")], "sm90_xmma_gemm_f32f32", gpu_us=50,
                     shapes=[[64, 64], [64, 64]], dtypes=["float", "float"])
            b.kernel(outer + [("torch_op", "aten::add")], "elementwise_kernel", gpu_us=2)
            b.copy(outer, "DtoH", nbytes=64)
            b.copy(outer, "HtoD", nbytes=4096, host_mem="pinned", sync=False)
            b.scalar_readback(outer)
            b.call(outer, "cudaDeviceSynchronize", "sync")
            b.tick(2000)  # an idle gap
    global _PROBE_DIR
    _PROBE_DIR = tempfile.TemporaryDirectory(prefix="zym-lint-")  # removed at exit: tables
    return analyze(b.write(Path(_PROBE_DIR.name) / "probe.parquet"))  # load lazily from it


_PROBE_DIR: tempfile.TemporaryDirectory | None = None


def run_against_engine(pack, fail: Callable[[str, str], Exception], analysis=None) -> None:
    """Run each rule of ``pack`` through the engine on ``analysis`` (default: the probe
    capture, and each rule also with ``where``/``having`` lifted; see module doc).
    ``fail(rule_id, message)`` builds the error to raise."""
    from .engine import evaluate_rules

    lift = analysis is None
    analysis = analysis if analysis is not None else _probe_analysis()
    for rule in pack.rules:
        variants = (rule, dataclasses.replace(rule, where={}, having={})) if lift else (rule,)
        for variant in variants:
            try:
                evaluate_rules(analysis, [variant])
            except Exception as e:  # noqa: BLE001 (any engine failure is the rule's problem)
                text = " ".join(str(e).split())[:240] or type(e).__name__
                raise fail(rule.id, f"the rule engine cannot run it ({type(e).__name__}: "
                                    f"{text})") from None
