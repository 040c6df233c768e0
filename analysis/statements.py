"""Statements written over several lines, from the lines' texts a capture keeps.

CPython reports a call at the line its expression starts: ``self.net(ids.to(dev),\n
first.to(dev))`` runs its arguments' CUDA calls at their lines, then the forward's at the first
line. Where a function's calls are told apart by its executing line going back to its first
CUDA line (eBPF stacks: :mod:`zym.analysis.phases`' steps, the per-item search in
:mod:`zym.analysis.relations`), a line is read as its statement's first.
"""
from __future__ import annotations

import numpy as np
import polars as pl

# How far apart two lines of one statement may be, where the lines between them issued no CUDA
# call (their text is not in the capture)
STATEMENT_MAX_GAP = 8


def bracket_depth(text: str | None) -> int | None:
    """Open minus closed brackets of a line of Python (outside strings and comments); None
    where the text is unknown or cut (the capture keeps at most 200 characters)."""
    if text is None or len(text) >= 200:
        return None
    depth, quote, i = 0, "", 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif text.startswith(quote, i):
                i += len(quote) - 1
                quote = ""
        elif c in "\"'":
            quote = c * 3 if text.startswith(c * 3, i) else c
            i += len(quote) - 1
        elif c == "#":
            break
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        i += 1
    return depth


def statement_starts(lines: np.ndarray, texts: pl.Series, group: np.ndarray | None = None
                     ) -> np.ndarray:
    """Per call, the first line of the statement its line (``lines``, -1 none) is in, from the
    lines' texts (``texts``, the capture's ``source``): a line that leaves brackets open goes
    on at the function's next line, and at a later line that issued CUDA calls (at most
    :data:`STATEMENT_MAX_GAP` lines on) where that line closes brackets it did not open,
    until they close. ``group``: each call's function
    (lines of different functions are never one statement; default: one function). One pass
    over the distinct lines (tens), not over the calls."""
    group = np.zeros(len(lines), np.int64) if group is None else np.asarray(group, np.int64)
    pairs = (pl.DataFrame({"group": group, "line": lines, "text": texts})
             .filter(pl.col("line") >= 0).unique(["group", "line"]).sort("group", "line"))
    start_of: dict[tuple[int, int], int] = {}
    start, depth, last, where = -1, 0, -(1 << 30), None
    for g, line, text in pairs.iter_rows():
        d = bracket_depth(text) or 0
        # the open statement goes on at the next line, or at a later one that closes brackets
        # it did not open (a line between issued no CUDA call); a later line that closes none
        # is a statement of its own (the open one closed on a line the capture has no text of)
        if (g == where and depth > 0 and line - last <= STATEMENT_MAX_GAP
                and (line == last + 1 or d < 0)):
            depth += d
        else:
            start, depth = line, max(d, 0)
        start_of[(g, line)] = start
        last, where = line, g
    moved = [(k, v) for k, v in start_of.items() if k[1] != v]
    if not moved:
        return lines
    width = int(lines.max(initial=0)) + 1
    keys = np.array([g * width + ln for (g, ln), _ in moved], np.int64)
    order = np.argsort(keys)
    keys, vals = keys[order], np.array([v for _, v in moved], np.int64)[order]
    key = group * width + lines
    at = np.clip(np.searchsorted(keys, key), 0, len(keys) - 1)
    return np.where((lines >= 0) & (keys[at] == key), vals[at], lines)


def statement_lines(nodes: pl.DataFrame, rows: np.ndarray, has: np.ndarray,
                    group: np.ndarray | None = None) -> np.ndarray:
    """Per call (``rows``: its frame's node row; ``has``: whether it has one), the first line
    of the statement its frame executes (:func:`statement_starts` over the distinct rows,
    ``group``: the function of each node row, default one function), else -1."""
    line = nodes["line"].cast(pl.Int64).fill_null(-1).to_numpy()
    out = np.full(len(rows), -1, np.int64)
    if not has.any():
        return out
    distinct, inverse = np.unique(rows[has], return_inverse=True)
    g = None if group is None else group[distinct]
    starts = statement_starts(line[distinct], nodes["source"].gather(distinct), g)
    out[has] = starts[inverse]
    return out
