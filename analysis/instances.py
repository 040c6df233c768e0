"""Which call of its enclosing function a CUDA call ran in, from call stacks alone.

"16 copies per call of ``strip_padding``" needs the calls of ``strip_padding``. Kineto records
a span per Python call (exact); ``zym capture`` records stacks at CUDA calls only. There, a
call of a function ``F`` made from one caller line ``P`` is a maximal run of consecutive CUDA
calls (on the thread) whose stacks pass through ``P`` then ``F``: the run ends when a call
comes from elsewhere. Two calls of ``F`` from the same line with no CUDA call in between
merge into one run; the steps (:mod:`zym.analysis.phases`) split them where the step function
is above ``F``, so a run never spans two steps.

Work per stack depth of the wanted calls' user frames is one gather over the calls through a
table of every stack node's ancestors (nodes x depth, small: stack tries have thousands of
nodes) and one running count, never a Python loop over calls or per (caller, function) pair.
"""
from __future__ import annotations

import functools
import sys

import numpy as np
import polars as pl
from zym.schemas.lookup import first_row_of, row_table

from .compiled import njit, writes
from .trie import Trie


class Ancestors:
    """Every stack node's ancestor at every depth: ``at(rows, depth)``; rows are those of the
    stack trie (:class:`zym.analysis.trie.Trie`, the ``nodes`` frame's own order), whose
    parent links and depth levels fill the table a level at a time."""

    def __init__(self, nodes: pl.DataFrame) -> None:
        self.trie = trie = Trie.of(nodes)
        self.depth = depth = nodes["depth"].cast(pl.Int64).to_numpy()
        self.key = (nodes["file"].fill_null("") + "\x1f" + nodes["name"].fill_null("")).to_numpy()
        # per row, its frame's line (-1: none), read where a call's executing line is asked
        self._line = nodes["line"] if "line" in nodes.columns else None
        # per row, its line's text (the capture's ``source``), None where the nodes have none
        self.sources = nodes["source"] if "source" in nodes.columns else None
        width = int(depth.max()) + 1 if len(depth) else 1
        table = np.full((len(trie), width), -1, np.int32)
        for rows in trie.levels:  # the roots' level first: parents are filled first
            d = int(depth[rows[0]])
            if d:
                up = trie.parent[rows]
                ok = up >= 0
                table[rows[ok], :d] = table[up[ok], :d]
            table[rows, d] = rows
        self.table = table

    @functools.cached_property
    def functions(self) -> np.ndarray:
        """Each row's function (its file and name) as a dense code."""
        return np.unique(self.key, return_inverse=True)[1].astype(np.int64)

    @functools.cached_property
    def statement_lines(self) -> np.ndarray:
        """Each row's frame line read as its statement's first (a call written over several
        lines: :func:`zym.analysis.statements.statement_starts`, per function), -1 where it
        has none; the frame line where the nodes keep no texts."""
        from .statements import statement_lines

        rows = np.arange(len(self.depth))
        if self.sources is None:
            return self.lines
        nodes = pl.DataFrame({"line": self.lines, "source": self.sources})
        return statement_lines(nodes, rows, self.lines >= 0, self.functions)

    @functools.cached_property
    def lines(self) -> np.ndarray:
        """Each row's frame line, -1 where it has none."""
        if self._line is None:
            return np.full(len(self.depth), -1, np.int64)
        return self._line.cast(pl.Int64).fill_null(-1).to_numpy()

    def rows(self, stack: pl.Series) -> np.ndarray:
        """Row of each stack id in the table (-1 for null or unknown ids)."""
        return first_row_of(pl.Series(self.trie.ids), stack).fill_null(-1).to_numpy()

    @functools.cached_property
    def _lookup(self) -> np.ndarray | None:
        """Row by stack id, where the ids are integers from 0 below 4x the nodes + 1024 (-1:
        no such node; an id's first row); else None (:meth:`rows` then): the table the
        compiled pass reads ids through."""
        ids = self.trie.ids
        if len(ids) and (ids.min() < 0 or ids.max() >= 4 * len(ids) + 1024):
            return None
        return row_table(ids, None, 0, int(ids.max()) if len(ids) else -1)

    def at(self, rows: np.ndarray, depth: int) -> np.ndarray:
        """Ancestor row at ``depth`` of each of ``rows`` (-1 where there is none)."""
        if depth < 0 or depth >= self.table.shape[1]:
            return np.full(len(rows), -1, np.int64)
        out = self.table[np.maximum(rows, 0), depth].astype(np.int64)
        return np.where(rows >= 0, out, -1)


def thread_order(thread: np.ndarray) -> np.ndarray:
    """The calls (``thread``: each call's ``_thread``, calls in time order) per thread, in
    time order: a stable sort, by radix on 16-bit keys (0.13 against 0.53 s at 12.5 M calls)
    where the thread ids span less than 2^16 (one process's threads), or where there are at
    most 2^16 of them (several processes, whose ``_thread`` holds the pid in its high bits:
    each id's rank among the distinct ones); int32 positions where they fit."""
    return _narrow(np.argsort(_small_key(thread), kind="stable"), len(thread))


def _small_key(ids: np.ndarray) -> np.ndarray:
    """``ids`` as 16-bit keys in the same order (numpy sorts those by radix), or as they are
    where more than 2^16 distinct values need more bits."""
    if not len(ids):
        return ids
    lo = int(ids.min())
    if int(ids.max()) - lo <= np.iinfo(np.uint16).max:
        return (ids - lo).astype(np.uint16)
    distinct = pl.Series(ids).unique()  # hashed: the ids are many, their values few
    if distinct.len() > np.iinfo(np.uint16).max + 1:
        return ids
    return np.searchsorted(np.sort(distinct.to_numpy()), ids).astype(np.uint16)


def previous_on_thread(thread: np.ndarray, order: np.ndarray,
                       counts: np.ndarray | None = None) -> np.ndarray:
    """Each call's previous call on its thread (-1: none before it), from
    :func:`thread_order`'s ``order``; with ``counts`` (a mask by call), the previous among the
    calls it marks."""
    prev = np.full(len(thread), -1, order.dtype)
    if len(order) < 2:
        return prev
    compiled = _compiled_previous() if len(order) >= JIT_MIN_CALLS else None
    if compiled is not None:  # one pass (the numpy passes below: ~1.1-1.6 s at 12.5 M calls)
        compiled(thread, order, counts if counts is not None else np.zeros(0, np.bool_), prev)
        return prev
    t = thread[order]
    same = t[1:] == t[:-1]
    del t
    if counts is None:
        prev[order[1:][same]] = order[:-1][same]
        return prev
    pos = np.arange(len(order))
    marked = np.where(counts[order], pos, -1)
    before = np.maximum.accumulate(np.r_[-1, marked[:-1]])   # last marked position before
    del marked
    run_start = np.maximum.accumulate(np.where(np.r_[True, ~same], pos, 0))
    ok = before >= run_start
    prev[order[ok]] = order[before[ok]]
    return prev


def call_instances(calls: pl.DataFrame, user_node: pl.Series, wanted: np.ndarray,
                   ancestors: Ancestors, steps: pl.Series | None,
                   order: np.ndarray | None = None) -> np.ndarray:
    """Instance id (an int64) for each call of ``wanted`` (``call_idx`` values), per the module
    doc. ``calls``: ``Facts.calls`` (time order); ``user_node``: each call's innermost user
    frame; ``steps``: each call's step or null; ``order``: :func:`thread_order` of the calls,
    where at hand. Ids say which calls share an instance; their values mean nothing else."""
    out = np.full(len(wanted), -1, np.int64)
    if not len(wanted):
        return out
    thread = calls["_thread"].to_numpy()
    if order is None:
        order = thread_order(thread)
    if len(calls) >= JIT_MIN_CALLS and _compiled_pass() is not None:
        return _one_pass(calls, user_node, wanted, ancestors, steps, out, order)
    # Every call, at millions of calls: positions and stack rows as int32 where they fit,
    # and each array freed once read (the calls' whole-length temporaries were ~1 GB at 10 M).
    n = len(thread)
    t = thread[order]
    boundary = np.r_[True, t[1:] != t[:-1]]
    del t
    if steps is not None:
        st = steps.fill_null(-1).to_numpy()[order]
        boundary[1:] |= st[1:] != st[:-1]
        del st
    position = np.empty(n, order.dtype)
    position[order] = np.arange(n)
    rows_sorted = _narrow(ancestors.rows(calls["stack_id"]), len(ancestors.depth))[order]
    del order
    u = ancestors.rows(user_node.gather(pl.Series(wanted)))
    depth = np.where(u >= 0, ancestors.depth[np.maximum(u, 0)], -1).astype(np.int32)
    del u
    code = frame_codes(ancestors)
    n_nodes = len(ancestors.depth)
    code_at = np.full(n_nodes + 1, -1, np.int64)  # per node, its frame's code; last: no node
    by_depth = _narrow(np.argsort(depth, kind="stable"), len(depth))  # wanted calls by depth
    sorted_depth = depth[by_depth]
    del depth
    distinct = sorted_depth[np.r_[True, sorted_depth[1:] != sorted_depth[:-1]]]
    for d in distinct[distinct >= 0].tolist():
        at = ancestors.table[:, d].astype(np.int64)
        code_at[:n_nodes] = np.where(at >= 0, code[np.maximum(at, 0)], -1)
        c = code_at[rows_sorted]  # row -1 (no stack) reads the last entry: -1
        starts = (c >= 0) & (boundary | np.r_[True, c[1:] != c[:-1]])
        del c
        run = np.cumsum(starts)
        mine = by_depth[np.searchsorted(sorted_depth, d):np.searchsorted(sorted_depth, d,
                                                                          side="right")]
        out[mine] = (d << 40) | run[position[wanted[mine]]]
    return out


def frame_codes(ancestors: Ancestors) -> np.ndarray:
    """Each node's (caller node, function) pair as one code: at a depth, consecutive calls
    whose frame there has the same code are one call of that function from that line."""
    n_nodes = len(ancestors.depth)
    caller = np.where(ancestors.depth > 0, ancestors.table[
        np.arange(n_nodes), np.maximum(ancestors.depth - 1, 0)], -1).astype(np.int64)
    _, fcode = np.unique(ancestors.key, return_inverse=True)
    _, code = np.unique((caller + 1) * (int(fcode.max(initial=0)) + 1) + fcode,
                        return_inverse=True)
    return code


def _one_pass(calls: pl.DataFrame, user_node: pl.Series, wanted: np.ndarray,
              ancestors: Ancestors, steps: pl.Series | None, out: np.ndarray,
              order: np.ndarray) -> np.ndarray:
    """``call_instances`` at millions of calls: the same ids, from one compiled pass over the
    calls in thread order that keeps a running count of runs at every depth some wanted call's
    user frame is at, reading stack ids through ``Ancestors``' lookup as it goes (the numpy
    path passes over every call once per such depth, with whole-length temporaries, and sorts
    the calls by thread and the wanted calls by depth)."""
    thread = calls["_thread"].to_numpy()
    n = len(thread)
    step = (steps.fill_null(-1).to_numpy() if steps is not None
            else np.zeros(0, np.int64))
    stack, lookup = calls["stack_id"], ancestors._lookup
    if lookup is None or not (stack.dtype.is_integer() and user_node.dtype.is_integer()):
        # ids through the dictionary: their rows stand for them, read through the identity
        stack_ids, user_ids = ancestors.rows(stack), ancestors.rows(user_node)
        lookup = np.arange(len(ancestors.depth))
    else:
        stack_ids = stack.fill_null(-1).to_numpy()
        user_ids = user_node.fill_null(-1).to_numpy()
    depths, one_pass = _compiled_pass()
    seen = np.zeros(ancestors.table.shape[1], np.bool_)  # the wanted calls' user frames' depths
    depths(wanted, user_ids, lookup, ancestors.depth, seen)
    distinct = np.flatnonzero(seen)
    # per node (last row: no node), its frame's code at each of those depths (-1: none)
    code = frame_codes(ancestors)
    at = ancestors.table[:, distinct].astype(np.int64)
    codes = np.full((len(ancestors.depth) + 1, len(distinct)), -1, np.int64)
    codes[:-1] = np.where(at >= 0, code[np.maximum(at, 0)], -1)
    del at
    column = np.full(len(seen), -1, np.int64)
    column[distinct] = np.arange(len(distinct))
    ids = np.empty(n, np.int64)
    one_pass(order, thread, step, stack_ids, user_ids, lookup, ancestors.depth, column, codes,
             ids)
    del order, stack_ids, user_ids
    out[:] = ids[wanted]
    return out


def _narrow(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` (positions below ``n``, or -1) as int32 where they fit, else as it is."""
    return a.astype(np.int32, copy=False) if n < np.iinfo(np.int32).max else a


# Calls from which the runs are counted by one compiled pass (numba) rather than numpy passes.
JIT_MIN_CALLS = 200_000


@writes("prev")
def _previous(thread, order, counts, prev) -> None:
    """``previous_on_thread`` in one pass over the calls in thread order: ``prev[c]``, the
    last call before ``c`` on its thread that ``counts`` marks (``counts`` empty: any call).
    For numba."""
    every = len(counts) == 0
    last = -1
    for i in range(len(order)):
        c = order[i]
        if i > 0 and thread[c] != thread[order[i - 1]]:
            last = -1
        prev[c] = last
        if every or counts[c]:
            last = c


@functools.cache
def _compiled_previous():
    """``_previous`` compiled by numba; None without numba (numpy passes then)."""
    compiled = njit(_previous)
    return compiled[0] if compiled else None


@writes("seen")
def _depths(wanted, user, lookup, depth, seen) -> None:
    """``seen[d]``: some call of ``wanted`` has its user frame (``user``: ids, read through
    ``lookup``; -1 or past it: none) at depth ``d``. For numba."""
    for i in range(len(wanted)):
        u = user[wanted[i]]
        if 0 <= u < len(lookup) and lookup[u] >= 0:
            seen[depth[lookup[u]]] = True


@writes("ids")
def _pass(order, thread, step, stack, user, lookup, depth, column, codes, ids) -> None:
    """Over the calls in thread order (``order``): at each depth (a column of ``codes``), a
    running count of run starts: a call whose frame there has a code (``codes`` at its stack
    row, ``stack``'s id read through ``lookup``; the last row: no stack) different from the
    previous call's, or a call at a boundary (a new thread or step; ``step`` empty: no
    steps). ``ids`` gets, at each call whose user frame (``user``) is at a depth ``d`` with a
    column, ``d << 40 | `` that column's count; else -1. For numba."""
    n_d = codes.shape[1]
    count = np.zeros(n_d, np.int64)
    prev = np.full(n_d, -1, np.int64)
    last = codes.shape[0] - 1
    has_steps = len(step) > 0
    for i in range(len(order)):
        c = order[i]
        b = i == 0
        if not b:
            p = order[i - 1]
            b = thread[c] != thread[p] or (has_steps and step[c] != step[p])
        r = last
        s = stack[c]
        if 0 <= s < len(lookup) and lookup[s] >= 0:
            r = lookup[s]
        for k in range(n_d):
            x = codes[r, k]
            if x >= 0 and (b or x != prev[k]):
                count[k] += 1
            prev[k] = x
        ids[c] = -1
        u = user[c]
        if 0 <= u < len(lookup) and lookup[u] >= 0:
            d = depth[lookup[u]]
            k = column[d]
            if k >= 0:
                ids[c] = (d << 40) | count[k]


@functools.cache
def _compiled_pass():
    """``_depths`` and ``_pass`` compiled by numba; None without numba (numpy passes then)."""
    return njit(_depths, _pass)


# Ids from which ``first_of_each`` loads numba to run compiled (it is not loaded yet).
JIT_MIN_IDS = 4_000_000


def first_of_each(ids: np.ndarray) -> np.ndarray:
    """Whether each of ``ids`` is the first of its value (in array order): which call opens
    its instance (``ids``: every call's ``call_instance``, by ``call_idx``). At millions of
    ids, one compiled pass over a hash table of the values seen (polars' hashing took
    1.6-2.8 s at 12.5 M calls, this ~0.45 s); else polars (below ``JIT_MIN_IDS`` where numba
    is not loaded: at 480 k calls its import cost 0.43 s, polars' pass 0.006 s)."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    # compiled where numba is loaded already (``call_instances``' pass at this many calls),
    # or the ids pay for loading it (~0.3-0.4 s, polars' time on ~3 M ids)
    worth = len(ids) >= JIT_MIN_IDS or (len(ids) >= JIT_MIN_CALLS and "numba" in sys.modules)
    compiled = _compiled_firsts() if worth else None
    if compiled is None:
        return pl.Series(ids).is_first_distinct().to_numpy()
    out = np.zeros(len(ids), np.bool_)
    compiled(ids, out)
    return out


@writes("out")
def _firsts(ids, out) -> None:
    """``out[i]``: ``ids[i]`` is the first of its value. Open addressing, linear probing, in a
    table of at least 4/3 the ids' slots (a power of two; Fibonacci hashing). For numba."""
    n = len(ids)
    bits = 4
    while (1 << bits) < n + n // 3:
        bits += 1
    mask = (1 << bits) - 1
    keys = np.empty(1 << bits, np.int64)
    used = np.zeros(1 << bits, np.bool_)
    shift = np.uint64(64 - bits)
    for i in range(n):
        v = ids[i]
        k = np.int64((np.uint64(v) * np.uint64(0x9E3779B97F4A7C15)) >> shift)
        while used[k] and keys[k] != v:
            k = (k + 1) & mask
        if not used[k]:
            used[k] = True
            keys[k] = v
            out[i] = True


@functools.cache
def _compiled_firsts():
    """``_firsts`` compiled by numba; None without numba."""
    compiled = njit(_firsts)
    return compiled[0] if compiled else None


def split_periodic(ids: np.ndarray, symbol: np.ndarray, inner: np.ndarray,
                   min_repeats: int, min_period: int = 2) -> np.ndarray:
    """Run ids (``ids``: calls in time order, each run's calls consecutive with one id, -1
    none) with each run that is an exact repetition of one sequence of ``symbol`` (each
    call's stack id), ``min_repeats`` times or more, each repetition ``min_period`` calls or
    more, split into its repetitions: a function called once per item from one line, whose
    calls' lines never go back (a comprehension's calls of a model's ``encode``, every CUDA
    call of it on the one line of its stage loop), is a run of the stacks of one call,
    repeated. The sequence is the run's shortest period. A run whose every call is inside
    one and the same frame below the function (``inner``: per call, that frame, or a
    negative value: none; the caller's loop over its items' calls of that frame repeats as
    they do: they, not its one call, are split where that frame's run is) is left whole. Ids
    stay >= 0 and distinct per call; -1 stays.

    The shortest period of a run is the first of the offsets where its first stack recurs
    (within ``1 / min_repeats`` of it, dividing its length) at which the run equals itself
    shifted: whole-array comparisons per run that may split, no loop over calls."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    n = len(ids)
    if not n:
        return ids
    symbol = np.asarray(symbol, dtype=np.int64)
    inner = np.asarray(inner, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    length = np.diff(np.r_[starts, n])
    same_inner = np.minimum.reduceat((inner == np.repeat(inner[starts], length))
                                     .astype(np.int8), starts).astype(bool)
    may = ((ids[starts] >= 0) & (length >= min_repeats * min_period)
           & ~(same_inner & (inner[starts] >= 0)))
    start = np.zeros(n, bool)
    start[starts] = True
    for s, m in zip(starts[may].tolist(), length[may].tolist()):
        run = symbol[s:s + m]
        offsets = np.flatnonzero(run[1:m // min_repeats + 1] == run[0]) + 1
        for p in offsets[m % offsets == 0].tolist():
            if np.array_equal(run[:-p], run[p:]):
                if p >= min_period:
                    start[s + p:s + m:p] = True
                break
    return np.where(ids >= 0, np.cumsum(start), -1).astype(np.int64)


# Calls a pass of :func:`enclosing_span_starts` handles at once: its temporaries are a few
# int64 arrays of this many rows (~40 MB), whatever the number of calls.
SPAN_CHUNK = 1 << 20


def enclosing_span_starts(thread: np.ndarray, user: np.ndarray, ts: np.ndarray,
                          span_thread: np.ndarray, span_user: np.ndarray,
                          span_ts: np.ndarray, span_end: np.ndarray,
                          chunk: int = SPAN_CHUNK) -> np.ndarray | None:
    """Per call (its ``thread``, its user frame's stack node ``user``, -1 for none, its start
    ``ts``): the start of the latest span of that frame on that thread that starts at or
    before the call (of spans that start together, the longest), where that span has not ended
    before the call; else ``-(row + 1)`` (the call is its own instance). The spans in any
    order. None where the spans' groups and times do not fit one int64 key (then the caller
    joins).

    Each span's (thread, frame) is numbered densely and its start packed with that number into
    one sorted int64 key; each call's key is searched among them (a binary search per call,
    ``chunk`` calls at a time): memory of a few arrays of the spans and of ``chunk`` calls,
    where polars' as-of join by two keys held ~140 bytes per call (at the bundled trace x200,
    2.4 M calls, +340 MB)."""
    n = len(ts)
    out = -np.arange(1, n + 1, dtype=np.int64)
    if not n or not len(span_ts):
        return out
    threads, t_of = np.unique(span_thread, return_inverse=True)
    users, u_of = np.unique(span_user, return_inverse=True)
    group = t_of.astype(np.int64) * len(users) + u_of
    low = min(int(span_ts.min()), int(ts.min()))
    width = max(int(span_ts.max()), int(ts.max())) - low + 1
    if (int(group.max()) + 1) * width >= 1 << 62:
        return None
    order = np.lexsort((span_end, span_ts, group))  # ties of a start: the longest last
    key = group[order] * width + (span_ts[order] - low)
    starts, ends, groups = span_ts[order], span_end[order], group[order]
    del order, group
    for at in range(0, n, chunk):
        part = slice(at, min(n, at + chunk))
        g = _group_of(thread[part], user[part], threads, users)
        c_ts = ts[part]
        pos = np.searchsorted(key, np.where(g >= 0, g, 0) * width + (c_ts - low),
                              side="right") - 1
        hit = pos >= 0
        pos = np.where(hit, pos, 0)
        hit &= (g >= 0) & (groups[pos] == g) & (ends[pos] >= c_ts)
        out[part] = np.where(hit, starts[pos], out[part])
    return out


def _group_of(thread: np.ndarray, user: np.ndarray, threads: np.ndarray, users: np.ndarray
              ) -> np.ndarray:
    """The dense (thread, frame) number of each call among the spans' (``threads``, ``users``:
    sorted distinct values), -1 where the spans have no such thread or frame."""
    t = np.searchsorted(threads, thread)
    u = np.searchsorted(users, user)
    t_ok = t < len(threads)
    u_ok = u < len(users)
    t = np.where(t_ok, t, 0)
    u = np.where(u_ok, u, 0)
    ok = t_ok & u_ok & (threads[t] == thread) & (users[u] == user) & (user >= 0)
    return np.where(ok, t.astype(np.int64) * len(users) + u, -1)


# The user frames' spans kept from the spans' checking pass, up to this many (4 int64 columns:
# ~128 MB); past it they are read again by a query where each call's instance is wanted.
USER_SPANS_CAP = 4_000_000


def instance_columns() -> list[pl.Expr]:
    """A span's columns as each call's instance is found from them (``_thread, user_node,
    inst_ts, inst_end``), from its ``pid, tid, stack_id, ts_ns, dur_ns``."""
    from .facts import thread_key

    return [thread_key(), pl.col("stack_id").alias("user_node"), pl.col("ts_ns").alias("inst_ts"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("inst_end")]


class UserFrameSpans:
    """The spans of the calls' user frames (``_thread, user_node, inst_ts, inst_end``), what
    each call's instance is found from (``Relations._instances``), gathered from the pass that
    checks every span (:meth:`add` on each part) rather than by a pass of their own: at the
    bundled trace x600 (73 M spans) each such pass read the file again, ~0.9 s, and the rules
    and the batching fixes each made one. Given up past ``cap`` rows (:meth:`frame` is then
    None, and the spans are queried as before)."""

    COLUMNS = ("pid", "tid", "ts_ns", "dur_ns", "stack_id")  # what :meth:`add` reads

    def __init__(self, users: pl.Series, cap: int | None = None) -> None:
        self.users = users.implode()
        self.cap = USER_SPANS_CAP if cap is None else cap
        self.rows = 0
        self.parts: list[pl.DataFrame] | None = []

    def add(self, part: pl.DataFrame) -> None:
        """Keep ``part``'s spans of the user frames (``COLUMNS`` at least)."""
        if self.parts is None:
            return
        got = part.filter(pl.col("stack_id").is_in(self.users)).select(instance_columns())
        self.rows += got.height
        if self.rows > self.cap:
            self.parts = None
        else:
            self.parts.append(got)

    def frame(self) -> pl.DataFrame | None:
        """Every kept span, or None where they were given up."""
        if self.parts is None:
            return None
        schema = {"_thread": pl.Int64, "user_node": pl.Int64, "inst_ts": pl.Int64,
                  "inst_end": pl.Int64}
        return pl.concat([p.cast(schema) for p in self.parts]) if self.parts else \
            pl.DataFrame(schema=schema)
