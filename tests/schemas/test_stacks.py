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


def _compiled_walk():
    from zym.schemas import stacks

    if stacks._stacks is None:
        pytest.skip("native stack walk not built (pip install -e . needs gcc and the Python "
                    "headers)")
    return stacks._stacks


@pytest.fixture(params=["rounds", "walk"])
def interning(request, monkeypatch):
    """intern_rows by the numpy rounds, or by the compiled walk."""
    from zym.schemas import stacks

    if request.param == "walk":
        _compiled_walk()
    else:
        monkeypatch.setattr(stacks, "_stacks", None)
    return request.param


def _random_forest(rng: random.Random, n: int, frames: int) -> tuple[list[int], list[int]]:
    """Rows' frames and parent rows (n: a root), parents anywhere in the rows (before or
    after the child), branching from any of the 40 nodes made before."""
    order = list(range(n))
    rng.shuffle(order)
    parent = [n] * n
    for k in range(1, n):
        if rng.random() > 0.05:
            parent[order[k]] = order[rng.randrange(max(0, k - 40), k)]
    return [rng.randrange(frames) for _ in range(n)], parent


@pytest.mark.parametrize("seed", range(8))
def test_rows_intern_to_their_paths_either_way(seed, interning):
    """Against the paths walked in Python: one id per distinct path, a valid trie, ids by
    depth then by the path's first row."""
    import numpy as np
    from zym.schemas.stacks import intern_rows

    rng = random.Random(seed)
    n = rng.randrange(1, 2500)
    frame, parent = _random_forest(rng, n, rng.randrange(1, 9))
    ids, stacks = intern_rows(np.array(frame, np.int64), np.array(parent, np.int32), 5)
    paths = []
    for r in range(n):
        path, cur = [], r
        while cur != n:
            path.append(frame[cur])
            cur = parent[cur]
        paths.append(tuple(reversed(path)))
    first: dict[tuple[int, ...], int] = {}
    for r, p in enumerate(paths):
        first.setdefault(p, r)
    expected = {p: 5 + i for i, p in enumerate(sorted(first, key=lambda p: (len(p), first[p])))}
    assert ids.tolist() == [expected[p] for p in paths]
    rows = {p: (sid, expected.get(p[:-1]), p[-1], len(p) - 1) for p, sid in expected.items()}
    assert sorted(stacks.iter_rows()) == sorted(rows.values())


def test_the_walk_and_the_rounds_agree_on_large_forests(monkeypatch):
    """Tens of thousands of rows and paths: the walk's table grows several times; its ids
    and trie are the rounds' exactly."""
    import numpy as np
    from zym.schemas import stacks

    walk = _compiled_walk()
    rng = random.Random(11)
    frame, parent = _random_forest(rng, 60_000, 50)
    args = np.array(frame, np.int64), np.array(parent, np.int64)
    monkeypatch.setattr(stacks, "_stacks", None)
    ids_a, trie_a = stacks.intern_rows(*args)
    monkeypatch.setattr(stacks, "_stacks", walk)
    ids_b, trie_b = stacks.intern_rows(*args)
    assert trie_a.height > 20_000
    assert np.array_equal(ids_a, ids_b) and trie_a.equals(trie_b)


@pytest.mark.parametrize("parent", [[1, 0], [0], [1, 2, 1, 3], [4, 0, 1, 2, 3]])
def test_cyclic_rows_are_refused_either_way(parent, interning):
    import numpy as np
    from zym.schemas.stacks import CyclicStacksError, intern_rows

    with pytest.raises(CyclicStacksError):
        intern_rows(np.zeros(len(parent), np.int64), np.array(parent, np.int32))


def test_the_walk_refuses_arrays_that_do_not_match():
    import numpy as np

    walk = _compiled_walk()
    frame, parent = np.zeros(4, np.int64), np.full(4, 4, np.int32)
    for bad in [(frame, parent, 4, np.full(3, -1, np.int64), 8),  # too short a path
                (frame, parent, 8, np.full(4, -1, np.int64), 8),  # parent width wrong
                (frame, parent, 4, np.full(4, -1, np.int64), 2)]:  # no such width
        with pytest.raises(ValueError, match="one entry per row"):
            walk.walk(*bad)
