"""The stack trie's array passes against a walk up each node's parent links in Python."""
from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest
from zym.analysis.trie import NONE, Trie


def random_trie(seed: int, n: int = 400, dense: bool = False) -> pl.DataFrame:
    """A forest of ``n`` nodes in shuffled row order, ids not in depth order and roots whose
    parent id is not in the table; ``dense``: ids from 0 to a little over ``n`` (a capture's),
    else spread over a hundred times that (searched) and one of them -1 (the unknown stack's id)."""
    rng = random.Random(seed)
    ids = rng.sample(range(n + 40) if dense else range(-1, 100 * n), n)
    parent: dict[int, int | None] = {}
    depth: dict[int, int] = {}
    for i, sid in enumerate(ids):
        up = None if i == 0 or rng.random() < 0.05 else ids[rng.randrange(i)]
        parent[sid] = up
        depth[sid] = 0 if up is None else depth[up] + 1
    rng.shuffle(ids)
    return pl.DataFrame({"stack_id": ids, "parent_id": [parent[s] for s in ids],
                         "depth": [depth[s] for s in ids]},
                        schema={"stack_id": pl.Int64, "parent_id": pl.Int64, "depth": pl.Int32})


def chain(nodes: pl.DataFrame, row: int) -> list[int]:
    """Rows from the root down to ``row``, by walking parent ids in Python."""
    ids = nodes["stack_id"].to_list()
    at = {s: r for r, s in enumerate(ids)}
    parents = nodes["parent_id"].to_list()
    out = [row]
    while parents[out[-1]] is not None and parents[out[-1]] in at:
        out.append(at[parents[out[-1]]])
    return out[::-1]


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_passes_match_a_walk_up_the_parent_links(seed, dense):
    nodes = random_trie(seed, dense=dense)
    trie = Trie.of(nodes)
    rng = np.random.default_rng(seed)
    mask = rng.random(nodes.height) < 0.3
    values = rng.integers(0, 1000, nodes.height)
    text = pl.Series([f"f{r}" if r % 7 else None for r in range(nodes.height)])
    near, outer, under = trie.nearest(mask), trie.outermost(mask), trie.under(mask)
    above, sums, joined = trie.count_above(mask), trie.subtree_sums(values), trie.joined(mask, text)
    paths = trie.paths(np.arange(nodes.height))
    below: dict[int, list[int]] = {r: [] for r in range(nodes.height)}
    for r in range(nodes.height):
        path = chain(nodes, r)
        assert paths[r] == path
        for a in path:
            below[a].append(r)
        hits = [a for a in path if mask[a]]
        assert near[r] == (hits[-1] if hits else NONE)
        assert outer[r] == (hits[0] if hits else NONE)
        assert under[r] == bool(hits)
        assert above[r] == len(hits) - int(mask[r])
        assert joined[r] == "".join(";" + (text[a] or "") for a in hits)
    for r in range(nodes.height):
        assert sums[r] == values[below[r]].sum()


@pytest.mark.parametrize("dense", [False, True])
def test_rows_of_and_roots(dense):
    nodes = random_trie(9, dense=dense)
    trie = Trie.of(nodes)
    ids = nodes["stack_id"].to_numpy()
    assert trie.rows_of(ids).tolist() == list(range(nodes.height))
    absent = sorted(set(range(-3, 460)) - set(ids.tolist()))
    missing = np.array([10 ** 9, -5, *absent])
    assert trie.rows_of(missing).tolist() == [NONE] * len(missing)
    # a node whose parent is null is a root, even where a node's id is -1
    roots = set(np.flatnonzero(trie.parent == NONE).tolist())
    parents = nodes["parent_id"].to_list()
    assert roots == {r for r, p in enumerate(parents) if p is None or p not in set(ids.tolist())}


def test_empty_trie():
    empty = pl.DataFrame(schema={"stack_id": pl.Int64, "parent_id": pl.Int64, "depth": pl.Int32})
    trie = Trie.of(empty)
    assert len(trie) == 0 and trie.rows_of(np.array([3])).tolist() == [NONE]
    none = np.zeros(0, bool)
    assert trie.nearest(none).tolist() == [] and trie.subtree_sums(np.zeros(0)).tolist() == []
    assert trie.joined(none, pl.Series([], dtype=pl.String)).to_list() == []
