"""The stack trie as arrays: what each stack node inherits from the nodes above it.

A capture's stacks are a trie (``stack_id``, ``parent_id``, ``depth``): thousands of nodes on
a model's forward pass, hundreds of thousands on a service with many call sites. Every fact a
node inherits along it (the nearest ancestor of a kind, the text of the frames above it, what
lies under a node, a subtree's sums) is computed here by one numpy pass per depth level over
arrays indexed by row (the nodes frame's own row order): the work is a few array operations
per level, never a Python step per node. Only :meth:`Trie.joined` builds text, one string per
marked node (the text itself is that size).

Rows are the rows of the ``nodes`` frame the trie was made from; ``-1`` stands for none.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import polars as pl
from zym.schemas.lookup import first_rows

NONE = -1


@dataclass(frozen=True)
class Trie:
    """Parent links and depth levels of a stack trie, by row."""

    ids: np.ndarray       # stack id of each row
    parent: np.ndarray    # row of each node's parent; NONE at a root (or an unknown parent)
    levels: tuple[np.ndarray, ...]  # the rows at each depth, the roots' level first

    @classmethod
    def of(cls, nodes: pl.DataFrame) -> Trie:
        """The trie of ``nodes`` (``stack_id``, ``parent_id``, ``depth``: a node's depth is its
        parent's plus one, as the capture's checks ensure), in any row order."""
        ids = nodes["stack_id"].cast(pl.Int64).to_numpy()
        parent_ids = nodes["parent_id"].cast(pl.Int64)
        depth = nodes["depth"].cast(pl.Int64).to_numpy()
        trie = cls(ids, np.full(len(ids), NONE, np.int64), ())
        # a root's parent is null (a stack id may be -1: the unknown stack's)
        parent = np.where(parent_ids.is_null().to_numpy(), NONE,
                          trie.rows_of(parent_ids.fill_null(0).to_numpy()))
        by_depth = np.argsort(depth, kind="stable")
        cuts = np.flatnonzero(np.diff(depth[by_depth])) + 1
        return cls(ids, parent, tuple(np.split(by_depth, cuts)) if len(ids) else ())

    def __len__(self) -> int:
        return len(self.ids)

    def rows_of(self, stack_ids: np.ndarray) -> np.ndarray:
        """The row of each stack id; NONE for ids not in the trie
        (:func:`zym.schemas.lookup.first_rows`: an array lookup where ids are dense)."""
        return first_rows(self.ids, stack_ids)

    def _up(self) -> np.ndarray:
        """Parent rows with roots pointing at an extra last slot (the arrays below carry one
        more entry, holding the value "none", so a root's parent needs no test)."""
        return np.where(self.parent >= 0, self.parent, len(self.ids))

    def _top_down(self, step) -> None:
        up = self._up()
        for rows in self.levels:
            step(rows, up[rows])

    def nearest(self, mask: np.ndarray) -> np.ndarray:
        """Per row, the row of its nearest ancestor-or-self where ``mask`` holds; NONE where
        none does."""
        near = np.full(len(self.ids) + 1, NONE, np.int64)

        def step(rows: np.ndarray, up: np.ndarray) -> None:
            near[rows] = np.where(mask[rows], rows, near[up])
        self._top_down(step)
        return near[:-1]

    def outermost(self, mask: np.ndarray) -> np.ndarray:
        """Per row, the row of its outermost ancestor-or-self where ``mask`` holds; NONE where
        none does."""
        out = np.full(len(self.ids) + 1, NONE, np.int64)

        def step(rows: np.ndarray, up: np.ndarray) -> None:
            above = out[up]
            out[rows] = np.where(above != NONE, above, np.where(mask[rows], rows, NONE))
        self._top_down(step)
        return out[:-1]

    def under(self, mask: np.ndarray) -> np.ndarray:
        """Per row: is it at or below a row where ``mask`` holds."""
        inside = np.zeros(len(self.ids) + 1, bool)

        def step(rows: np.ndarray, up: np.ndarray) -> None:
            inside[rows] = mask[rows] | inside[up]
        self._top_down(step)
        return inside[:-1]

    def count_above(self, mask: np.ndarray) -> np.ndarray:
        """Per row, how many of its strict ancestors ``mask`` marks."""
        upto = np.zeros(len(self.ids) + 1, np.int64)   # ancestors-or-self marked
        above = np.zeros(len(self.ids), np.int64)

        def step(rows: np.ndarray, up: np.ndarray) -> None:
            above[rows] = upto[up]
            upto[rows] = upto[up] + mask[rows]
        self._top_down(step)
        return above

    def subtree_sums(self, values: np.ndarray) -> np.ndarray:
        """Per row, ``values`` summed over the node and every node below it."""
        total = np.array(values, dtype=np.int64, copy=True)
        for rows in self.levels[:0:-1]:   # deepest first; the roots' level adds to nothing
            up = self.parent[rows]
            has = up != NONE
            np.add.at(total, up[has], total[rows[has]])
        return total

    def joined(self, mask: np.ndarray, text: pl.Series, sep: str = ";") -> pl.Series:
        """Per row, ``sep + text`` of every ancestor-or-self where ``mask`` holds, outermost
        first, concatenated (``";a;b"``); ``""`` where none does. One string is built per
        marked row, from its nearest marked ancestor's."""
        near = self.nearest(mask)
        marked = np.flatnonzero(mask)
        slot = np.full(len(self.ids), 0, np.int64)     # each marked row's string: 1 + its index
        slot[marked] = np.arange(1, len(marked) + 1)
        above = take_rows(near, self.parent)
        parts = text.cast(pl.String).fill_null("").to_list()
        strings = [""] * (len(marked) + 1)
        for rows in self.levels:
            rows = rows[mask[rows]]
            if not len(rows):
                continue
            from_slot = take_rows(slot, above[rows], 0)
            for r, s, f in zip(rows.tolist(), slot[rows].tolist(), from_slot.tolist()):
                strings[s] = strings[f] + sep + parts[r]
        return pl.Series(strings, dtype=pl.String).gather(take_rows(slot, near, 0))

    @cached_property
    def _parents(self) -> list[int]:
        return self.parent.tolist()

    def paths(self, rows: np.ndarray) -> list[list[int]]:
        """The rows from the root down to each of ``rows`` (a NONE row: an empty path)."""
        out: list[list[int]] = []
        parent = self._parents
        for r in np.asarray(rows, np.int64).tolist():
            chain = []
            while r != NONE:
                chain.append(r)
                r = parent[r]
            out.append(chain[::-1])
        return out


def take_rows(values: np.ndarray, rows: np.ndarray, none: int = NONE) -> np.ndarray:
    """``values`` at ``rows`` (a pass's answer); ``none`` where a row is NONE."""
    return np.where(rows != NONE, values[np.maximum(rows, 0)], none)


def values_at(values: pl.Series, rows: np.ndarray) -> pl.Series:
    """``values`` at ``rows``; null where a row is NONE."""
    if not len(rows):
        return values.clear()
    return values.gather(np.maximum(rows, 0)).scatter(np.flatnonzero(rows == NONE), None)
