"""The fast paths for large captures give the findings the plain ones do.

* The replay's epoch loop runs compiled (numba) from ``JIT_MIN_EPOCHS`` epochs and
  interpreted below: every finding, saving and what-if total is the same either way, on the
  bundled trace and on a synthetic capture with thousands of syncs (bench/make_synthetic.py).
* ``call_instance`` (runs of a thread's calls through the same caller line and function) is
  computed by one pass per stack depth: it matches a walk over each thread's calls, one by
  one, from the stack trie's parent links.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import polars as pl
import pytest
from zym.analysis import analyze, replay
from zym.analysis.export.summary import build_report
from zym.rules import evaluate, load_packs

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "gpt_decode_server.trace.json.gz"
EBPF_SAMPLE = REPO / "sample_traces" / "gpt_decode_server.parquet"


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    spec = importlib.util.spec_from_file_location("make_synthetic",
                                                  REPO / "bench" / "make_synthetic.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make(12_000, tmp_path_factory.mktemp("synthetic") / "s.parquet")


def _report(path: Path, jit_from: int, monkeypatch) -> dict:
    monkeypatch.setattr(replay, "JIT_MIN_EPOCHS", jit_from)
    analysis = analyze(path, lambda _stage: None, "steady")
    findings = evaluate(analysis, load_packs(()), ())
    return build_report(analysis, findings, None, 5, None)


@pytest.mark.parametrize("which", ["sample", "synthetic"])
def test_findings_are_the_same_with_the_loop_compiled_or_interpreted(which, synthetic,
                                                                     monkeypatch):
    if replay._compiled_epochs() is None:
        pytest.skip("numba not installed (the zym[fast] extra)")
    path = SAMPLE if which == "sample" else synthetic
    interpreted = _report(path, 1 << 62, monkeypatch)
    compiled = _report(path, 0, monkeypatch)
    assert interpreted["findings"], "nothing to compare: no findings"
    assert any(f["saving_ns"] for f in interpreted["findings"])
    assert compiled == interpreted


def _walked_instances(analysis) -> pl.DataFrame:
    """Per call with a user frame: (thread, first call of its run), walking each thread's calls
    in time order and comparing neighbours' frames at the user frame's depth."""
    nodes = analysis.facts.nodes
    parent = dict(zip(nodes["stack_id"].to_list(), nodes["parent_id"].to_list()))
    depth = dict(zip(nodes["stack_id"].to_list(), nodes["depth"].to_list()))
    key = {s: (f or "", n or "") for s, f, n in zip(nodes["stack_id"].to_list(),
                                                   nodes["file"].to_list(),
                                                   nodes["name"].to_list())}

    def ancestor(stack, d):
        while stack is not None and depth.get(stack, -1) > d:
            stack = parent.get(stack)
        return stack if stack is not None and depth.get(stack) == d else None

    def frame_at(stack, d):  # (caller node, function) of the stack's frame at depth d
        a = ancestor(stack, d)
        return None if a is None else (ancestor(stack, d - 1) if d else None, key[a])

    rel = analysis.relations
    calls = rel.calls_table()
    user = rel.site_of(calls["stack_id"], ("user_node",))[0].to_list()
    steps = rel.call_steps().to_list()
    rows = sorted(zip(calls["_thread"].to_list(), calls["call_idx"].to_list(),
                      calls["stack_id"].to_list(), user, steps))
    out = []
    for i, (thread, idx, stack, u, step) in enumerate(rows):
        if u is None or u not in depth:
            continue
        d = depth[u]
        mine = frame_at(stack, d)
        j = i
        while j > 0 and rows[j - 1][0] == thread and rows[j - 1][4] == step \
                and frame_at(rows[j - 1][2], d) == mine:
            j -= 1
        out.append({"call_idx": idx, "walked": f"{thread}:{rows[j][1]}:{d}"})
    return pl.DataFrame(out)


@pytest.mark.parametrize("which", ["ebpf sample", "synthetic"])
def test_call_instances_match_a_walk_over_each_threads_calls(which, synthetic):
    analysis = analyze(EBPF_SAMPLE if which == "ebpf sample" else synthetic,
                       lambda _stage: None, "steady")
    assert analysis.relations.instance_source == "stacks"
    got = analysis.relations.materialize("calls", {"call_instance"}).select(
        "call_idx", "call_instance")
    walked = _walked_instances(analysis)
    both = walked.join(got, on="call_idx", how="left")
    assert both.height > 1000 and both["call_instance"].min() >= 0
    # The same partition of the calls: each walked run is one instance, and back.
    assert both.group_by("walked").agg(pl.col("call_instance").n_unique())["call_instance"] \
        .max() == 1
    assert both.group_by("call_instance").agg(pl.col("walked").n_unique())["walked"].max() == 1
    assert both["walked"].n_unique() < both.height  # some runs hold several calls
    no_user = got.join(walked, on="call_idx", how="anti")
    assert (no_user["call_instance"] == -1).all()
