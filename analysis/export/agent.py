"""`zym mcp`: the analysis, its findings and `zym diff` as MCP tools over stdio, for coding agents.

Tools (each returns what the matching command prints with ``--format json``):

* ``analyze(path, window, top)``: ``zym analyze``'s report (capture facts, phases, findings
  ranked by saving, call paths, top kernels);
* ``findings(path, window)``: the findings alone, ranked, with what all fixes save together;
* ``diff(before, after, window, top, repeat)``: ``zym diff``'s comparison.

**Extension point.** More tools come from modules that expose ``mcp_tools() -> list[callable]``
(each a typed, documented function; its name, signature and docstring become the tool):

* :data:`TOOL_MODULES`: zym's own, imported when installed (``zym.fleet``: ``fleet_top``,
  ``fleet_findings``, ``fleet_diff``, ``fleet_sql``, from ``fleet/mcp.py``);
* the ``zym.mcp_tools`` entry-point group: a plugin's module, or a callable returning the list.

Analyses are cached per (file, size, mtime, window), a few at a time: an agent asks several
questions of one capture (``diff`` reuses the analyses ``analyze`` and ``findings`` made).
"""
from __future__ import annotations

import importlib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

TOOL_MODULES = ("zym.fleet",)  # modules whose mcp_tools() add tools, when importable
ENTRY_POINT_GROUP = "zym.mcp_tools"
CACHE_SIZE = 4
INSTRUCTIONS = (
    "zym profiles GPU inference: Python line -> torch op -> CUDA call -> GPU kernel. Give a "
    "zym capture (.parquet) or a torch.profiler trace (.json, .json.gz). `findings` says what "
    "to fix first, ranked by what each fix saves; `analyze` adds the call paths and kernels; "
    "`diff` compares two captures per step and says which changes are above noise.")


class _Cache:
    """The last few analyses (with their findings), keyed by file identity and window."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self.items: OrderedDict[tuple, tuple] = OrderedDict()

    def get(self, path: str, window: str) -> tuple:
        from zym.rules import evaluate
        from zym.schemas.errors import InputError

        from ..budget import available_budget
        from ..report import analyze

        p = Path(path).expanduser()
        try:
            st = p.stat()
        except OSError as e:
            raise InputError(f"{path}: {e.strerror.lower() if e.strerror else 'cannot read'}")
        key = (str(p.resolve()), st.st_size, st.st_mtime_ns, window)
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key]
        # as `zym analyze` by default: sampled where the analysis would take more than half
        # the memory available (the report then says so)
        analysis = analyze(p, None, window, available_budget(), budget_given=False)
        value = (analysis, evaluate(analysis))
        self.items[key] = value
        while len(self.items) > self.size:
            self.items.popitem(last=False)
        return value


_cache = _Cache()


def analyze_tool(path: str, window: str = "steady", top: int = 10) -> dict[str, Any]:
    """Analyze a capture: findings ranked by what fixing each saves, then the call paths (Python
    line -> torch op -> CUDA call -> GPU operation) by GPU time and by CPU time blocked, and the
    top kernels. window: steady (default), all, FROM:TO or steps:A:B. top: entries per ranking."""
    from .summary import build_report

    analysis, found = _cache.get(path, window)
    return _plain(build_report(analysis, found, top, 5))


def findings_tool(path: str, window: str = "steady") -> dict[str, Any]:
    """What to fix first in a capture: every finding (rule, site, message, fix, estimated
    saving) ranked by saving, and what all fixes save together."""
    from .summary import build_report

    analysis, found = _cache.get(path, window)
    report = build_report(analysis, found, 0)
    return _plain({"findings": report["findings"], "fixes_together": report["fixes_together"],
                   "phases": report["phases"]})


def diff_tool(before: str, after: str, window: str = "steady", top: int = 10,
              repeat: str | None = None) -> dict[str, Any]:
    """Compare two captures (any producers): call sites and kernels matched across them, GPU
    time, CPU time blocked, syncs, copies and bytes per step (per second without steps), which
    changes are above noise, findings that appeared, disappeared or changed. repeat: a second
    capture of the baseline's code, to measure run-to-run noise."""
    from ..diff import Noise, compare
    from .diff import profile_with_findings

    b, a = (profile_with_findings(*_cache.get(p, window)) for p in (before, after))
    again = None if repeat is None else profile_with_findings(*_cache.get(repeat, window))
    return _plain(compare(b, a, Noise(repeat=again)).to_dict(top))


BUILTIN_TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "analyze": analyze_tool, "findings": findings_tool, "diff": diff_tool}


def _plain(value: Any) -> Any:
    """JSON-ready: what ``--format json`` would print (numpy/polars scalars, paths as text)."""
    import json

    return json.loads(json.dumps(value, default=str))


def extra_tools() -> list[Callable[..., Any]]:
    """Tools from :data:`TOOL_MODULES` that are installed and from entry-point plugins."""
    from importlib.metadata import entry_points

    tools: list[Callable[..., Any]] = []
    for name in TOOL_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as e:  # not installed, or its own dependencies are not: not offered
            if not (e.name is not None and name.startswith(e.name)):
                import sys

                print(f"zym mcp: the {name} tools are not offered ({e})", file=sys.stderr)
            continue
        if hasattr(module, "mcp_tools"):
            tools += list(module.mcp_tools())
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        target = ep.load()
        tools += list(target.mcp_tools() if hasattr(target, "mcp_tools") else target())
    return tools


def build_server():
    """The MCP server with zym's tools (the ``mcp`` package's ``MCPServer``)."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("zym", instructions=INSTRUCTIONS)
    for name, fn in BUILTIN_TOOLS.items():
        server.add_tool(_errors_as_tool_errors(fn), name=name, description=fn.__doc__)
    for fn in extra_tools():
        server.add_tool(_errors_as_tool_errors(fn), name=fn.__name__, description=fn.__doc__)
    return server


def _errors_as_tool_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with zym's input errors (bad file, bad window) raised as the SDK's ToolError: the
    agent gets the one-line message, as the CLI prints it, not a traceback."""
    import functools

    from mcp.server.mcpserver.exceptions import ToolError
    from zym.schemas.errors import ZymError
    from zym.schemas.text import printable

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ZymError as e:
            raise ToolError(f"zym: error: {printable(e)}") from None

    return wrapper


def serve_stdio() -> None:
    """Serve the tools over stdin/stdout until the client closes them."""
    build_server().run("stdio")
