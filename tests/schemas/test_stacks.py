"""Stack interning: identical root paths share an id, whatever the forest's shape."""
from __future__ import annotations

import random

import polars as pl
import pytest
from zym.schemas.stacks import intern_forest


def _reference(nodes: list[tuple[int, int | None, int]]) -> dict[int, tuple[int, ...]]:
    """Each node's root path of frames, by walking parents in Python."""
    parent = {n: p for n, p, _ in nodes}
    frame = {n: f for n, _, f in nodes}
    out = {}
    for n in parent:
        path, cur = [], n
        while cur is not None and cur in frame:
            path.append(frame[cur])
            cur = parent[cur]
        out[n] = tuple(reversed(path))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_same_path_same_id_and_a_valid_trie(seed):
    rng = random.Random(seed)
    nodes: list[tuple[int, int | None, int]] = []
    for i in range(3000):
        parent = None if i == 0 or rng.random() < 0.05 else rng.choice(nodes[-60:])[0]
        nodes.append((i * 7 + 3, parent, rng.randrange(6)))  # few frames: many shared paths
    rng.shuffle(nodes)
    df = pl.DataFrame(nodes, schema={"node": pl.Int64, "parent": pl.Int64, "frame_id": pl.Int64},
                      orient="row")
    node_stack, stacks = intern_forest(df, first_id=100)
    paths = _reference(nodes)
    stack_of = dict(node_stack.iter_rows())
    by_path: dict[tuple[int, ...], int] = {}
    for node, path in paths.items():
        assert by_path.setdefault(path, stack_of[node]) == stack_of[node]
    assert len(by_path) == stacks.height == stacks["stack_id"].n_unique()
    trie = {r["stack_id"]: r for r in stacks.iter_rows(named=True)}
    for path, sid in by_path.items():  # walking the trie up gives the path back
        walked, cur = [], sid
        while cur is not None:
            walked.append(trie[cur]["frame_id"])
            assert trie[cur]["depth"] == len(path) - len(walked)
            cur = trie[cur]["parent_id"]
        assert tuple(reversed(walked)) == path
    assert min(trie) == 100


def test_ids_do_not_depend_on_row_order():
    nodes = pl.DataFrame({"node": [1, 2, 3, 4], "parent": [None, 1, 1, 2], "frame_id": [5, 6, 7, 8]})
    a = intern_forest(nodes)[1]
    b = intern_forest(nodes.reverse())[1]
    assert a.equals(b)


def test_cycles_are_refused():
    nodes = pl.DataFrame({"node": [1, 2], "parent": [2, 1], "frame_id": [0, 0]})
    with pytest.raises(ValueError, match="cyclic"):
        intern_forest(nodes)


def test_an_empty_forest_interns_to_nothing():
    nodes = pl.DataFrame(schema={"node": pl.Int64, "parent": pl.Int64, "frame_id": pl.Int64})
    node_stack, stacks = intern_forest(nodes)
    assert node_stack.height == 0 and stacks.height == 0
    assert stacks.columns == ["stack_id", "parent_id", "frame_id", "depth"]


def test_deep_chains_and_keys_far_apart():
    """A chain 1,500 frames deep (11 rounds of pointer jumping) beside short branches off
    it, keyed by numbers too far apart to index an array: every node's path, as the walk
    finds it."""
    rng = random.Random(3)
    nodes: list[tuple[int, int | None, int]] = [(10**12, None, 1)]
    for i in range(1, 1500):
        nodes.append((10**12 + i * 10**6, nodes[-1][0], rng.randrange(3)))
    for i in range(600):  # a branch of one or two frames off a random chain node
        at = rng.choice(nodes[:1500])[0]
        nodes.append((-i - 1, at, 7))
        if i % 2:
            nodes.append((-(10**9) - i, -i - 1, 8))
    df = pl.DataFrame(nodes, schema={"node": pl.Int64, "parent": pl.Int64, "frame_id": pl.Int64},
                      orient="row")
    node_stack, stacks = intern_forest(df)
    paths = _reference(nodes)
    stack_of = dict(node_stack.iter_rows())
    by_path: dict[tuple[int, ...], int] = {}
    for node, path in paths.items():
        assert by_path.setdefault(path, stack_of[node]) == stack_of[node]
    assert len(by_path) == stacks.height
    assert stacks["depth"].max() == max(len(p) for p in paths.values()) - 1 >= 1499


def test_a_node_without_a_frame_is_refused():
    nodes = pl.DataFrame({"node": [1, 2], "parent": [None, 1], "frame_id": [0, None]})
    with pytest.raises(ValueError, match="without a frame"):
        intern_forest(nodes)


def test_no_rows_intern_to_nothing():
    import numpy as np
    from zym.schemas.stacks import intern_rows

    ids, stacks = intern_rows(np.zeros(0, np.int64), np.zeros(0, np.int32))
    assert len(ids) == 0 and stacks.height == 0
    assert stacks.columns == ["stack_id", "parent_id", "frame_id", "depth"]
