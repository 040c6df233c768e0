"""Attention written out by hand, kernel by kernel: ``softmax(q @ k^T * scale) @ v`` as
PyTorch runs it, found in the order a thread launched its kernels. Each softmax kernel with a
batched matmul before it and one after it (``aten::bmm``/``aten::baddbmm``, no other softmax
between them, a few kernels apart, all three from the same user function) is one attention;
its kernels are:

* ``scores``: the first matmul (``q @ k^T``), and ``output``: the second (``probs @ v``);
* ``softmax``, and ``between``: the element-wise and copy kernels between the two matmuls
  (the scaling, a mask added, dropout, the copy that makes ``v`` contiguous for the matmul);
* ``input_copy``: copies made right before the first matmul to make ``q`` and ``k``
  contiguous (inside ``aten::matmul``, or, where the producer records no op chain, from the
  matmul's own line);
* ``scale``: an element-wise ``aten::mul``/``aten::div`` right before the first matmul (and
  its input copies) from the same function and line, ``q * scale``.

What a fused kernel (``F.scaled_dot_product_attention``) does away with is the softmax, the
kernels between, the input copies and the scale; the matmuls' work it does itself. Kernels
after the second matmul (the output's ``transpose(1, 2).reshape``, a residual add, an
activation further on) are not the attention's: a function that holds a whole transformer
block keeps them.
"""
from __future__ import annotations

import functools

import numpy as np

BMM_OPS = ("aten::bmm", "aten::baddbmm")
SCALE_OPS = ("aten::mul", "aten::div")
# At most this many kernels from the first matmul to the second (scale, mask, softmax,
# dropout, a copy: 6; more is no attention written in one expression)
MAX_SPAN = 10
# Matmuls this short (us, the two together) are taken to cost what the fused kernel costs
# (1x): what it takes is measured only where they take ~100 us or more (shorter, CUDA events
# around one call time the host's launches, bench/whatif/attention_table.py); between, the
# ratio goes from 1 to the shortest measured one in log time.
UNMEASURED_US = 10.0
ROLES = ("scores", "softmax", "between", "input_copy", "scale", "output")
# The roles a fused attention kernel takes away (its matmuls' work it does itself).
FUSED_AWAY = ("softmax", "between", "input_copy", "scale")


def find_attention(thread: np.ndarray, op_class: np.ndarray, bmm: np.ndarray,
                   scale_op: np.ndarray, chain_known: np.ndarray, in_matmul: np.ndarray,
                   function: np.ndarray, line: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernels of hand-written attention among kernels given in launch order (each
    thread's in the order it launched them). Per kernel: its ``thread`` (an integer key),
    ``op_class`` (strings), whether its innermost torch op is a batched matmul (``bmm``:
    :data:`BMM_OPS`) or a scaling (``scale_op``: :data:`SCALE_OPS`), whether the producer
    recorded its op chain (``chain_known``) and, if so, whether it ran inside ``aten::matmul``
    (``in_matmul``), and integer keys of its user ``function`` and user ``line``.

    Returns ``(at, role, softmax)``: positions of the attention's kernels, each one's role
    (an index into :data:`ROLES`) and the position of its attention's softmax kernel."""
    n = len(thread)
    empty = (np.zeros(0, np.int64),) * 3
    sm = op_class == "softmax"
    if n == 0 or not sm.any() or not bmm.any():
        return empty
    pos = np.arange(n)
    new_thread = np.r_[True, thread[1:] != thread[:-1]]
    start = np.maximum.accumulate(np.where(new_thread, pos, 0))   # each one's thread's first
    end = np.minimum.accumulate(np.where(np.r_[new_thread[1:], True], pos, n)[::-1])[::-1]
    prev_bmm = np.maximum.accumulate(np.where(bmm, pos, -1))
    next_bmm = np.minimum.accumulate(np.where(bmm, pos, n)[::-1])[::-1]
    prev_sm = np.maximum.accumulate(np.where(sm, pos, -1))
    s = np.flatnonzero(sm)
    b1 = np.where(s > 0, prev_bmm[np.maximum(s - 1, 0)], -1)
    b2 = np.where(s + 1 < n, next_bmm[np.minimum(s + 1, n - 1)], n)
    ok = (b1 >= start[s]) & (b2 <= end[s])
    b1c, b2c = np.maximum(b1, 0), np.minimum(b2, n - 1)
    ok &= (b2c - b1c <= MAX_SPAN) & (prev_sm[b2c] == s)   # no other softmax up to the output
    ok &= np.where(s > 0, prev_sm[np.maximum(s - 1, 0)], -1) < b1   # ... nor before it
    ok &= (function[b1c] == function[s]) & (function[b2c] == function[s])
    s, b1, b2 = s[ok], b1[ok], b2[ok]
    if not len(s):
        return empty
    at, role, owner = [b1, b2], [np.zeros(len(s), np.int64), np.full(len(s), 5)], [s, s]
    # between the matmuls: the softmax, and the element-wise and copy kernels
    span = b2 - b1 - 1
    rep = np.repeat(np.arange(len(s)), span)
    inner = b1[rep] + 1 + (np.arange(len(rep)) - np.repeat(np.cumsum(span) - span, span))
    keep = np.isin(op_class[inner], ("elementwise", "copy")) | (inner == s[rep])
    inner, rep = inner[keep], rep[keep]
    at.append(inner)
    role.append(np.where(inner == s[rep], 1, 2))
    owner.append(s[rep])
    # before the first matmul: the copies that make its inputs contiguous (q's, k's, a
    # broadcast mask's), then the scale
    cur = b1 - 1
    live = cur >= start[b1]
    for _ in range(4):
        c = np.maximum(cur, 0)
        made_for = np.where(chain_known[c], in_matmul[c], line[c] == line[b1])
        hit = live & (op_class[c] == "copy") & made_for & (function[c] == function[b1])
        at.append(c[hit])
        role.append(np.full(int(hit.sum()), 3))
        owner.append(s[hit])
        cur = np.where(hit, cur - 1, cur)
        live = hit & (cur >= start[b1])
    c = np.maximum(cur, 0)
    scale = ((cur >= start[b1]) & (op_class[c] == "elementwise") & scale_op[c]
             & (function[c] == function[b1]) & (line[c] == line[b1]))
    at.append(c[scale])
    role.append(np.full(int(scale.sum()), 4))
    owner.append(s[scale])
    at, role, owner = (np.concatenate(x).astype(np.int64) for x in (at, role, owner))
    # a kernel claimed twice (one attention's output matmul another's scores: none written
    # so by hand) keeps the role listed first in ROLES (scores before output)
    order = np.lexsort((role, at))
    at, role, owner = at[order], role[order], owner[order]
    first = np.r_[True, at[1:] != at[:-1]]
    return at[first], role[first], owner[first]


def fused_ratio(precision: np.ndarray, pair_ns: np.ndarray) -> np.ndarray:
    """The fused kernel's GPU time over the two matmuls' (``attention_costs.yaml``), for
    attentions whose matmuls ran in ``precision`` (fp32, tf32, bf16, fp16; other or None:
    1, the matmuls' time as it is) and took ``pair_ns`` together: the measured points of that
    math, each the median of it and its neighbours in time (one shape's noise), read between
    them in log time, held past the last, and below the first going to 1 at
    :data:`UNMEASURED_US` (:func:`curve`)."""
    out = np.ones(len(pair_ns))
    curves = _curves()
    for math, (x, y) in curves.items():
        mine = precision == math
        if mine.any():
            t = np.log(np.maximum(pair_ns[mine], 1) / 1e3)
            out[mine] = np.interp(t, x, y)
    return out


@functools.cache
def _curves() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per math, :func:`curve` of its points in ``attention_costs.yaml``."""
    from .bundled import bundled_yaml

    return {math: curve(points)
            for math, points in bundled_yaml("attention_costs.yaml")["fused_over_matmuls"].items()}


def curve(points: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Measured points [the matmuls' time (us), the fused kernel's over theirs] as a curve:
    the log of the times, in order, each ratio the median of it and its neighbours, and
    below the shortest measured, towards 1 at :data:`UNMEASURED_US`."""
    pts = np.asarray(sorted(points), float)
    y = pts[:, 1]
    x, smooth = np.log(pts[:, 0]), np.asarray([np.median(y[max(i - 1, 0):i + 2])
                                               for i in range(len(y))])
    if pts[0, 0] > UNMEASURED_US:
        x, smooth = np.r_[np.log(UNMEASURED_US), x], np.r_[1.0, smooth]
    return x, smooth
