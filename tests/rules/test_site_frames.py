"""The site column ``frames`` (every Python frame above a site, as text): built only when a rule
names it, and what it holds, against the capture's own stack and frame tables walked in
Python."""
from __future__ import annotations

from zym.analysis import analyze
from zym.rules import evaluate, load_packs
from zym.rules.model import parse_pack

from tests.conftest import SAMPLE

PACK = """
pack: mine
version: 1
doc: Syncs under one function.
rules:
  - id: mine.syncs-under-generate
    title: "Syncs under generate"
    severity: info
    doc: Syncs whose Python frames include generate.
    relation: calls
    where:
      kind: sync
      frames: {regex: "gpt_decode_server\\\\.py:generate;"}
    group_by: []
    having:
      count: {ge: 1}
    cost: stall_ns
    message: "{count} syncs under generate"
    fix: none
"""


def python_frames(data, stack_id: int) -> list[str]:
    """``file:name`` of the Python frames from the root down to ``stack_id``."""
    stacks = {s: (p, f) for s, p, f in data.stacks.select(
        "stack_id", "parent_id", "frame_id").iter_rows()}
    frames = {f: (k, n, fl) for f, k, n, fl in data.frames.select(
        "frame_id", "kind", "name", "file").iter_rows()}
    out = []
    while stack_id is not None:
        parent, frame = stacks[stack_id]
        kind, name, file = frames[frame]
        if kind == "python":
            out.append(f"{file or '?'}:{name}")
        stack_id = parent
    return out[::-1]


def test_frames_is_built_only_for_a_rule_that_names_it_and_holds_the_python_frames():
    a = analyze(SAMPLE)
    evaluate(a, load_packs(()), ())
    assert "frames" not in a.relations.sites.columns
    assert "sites_with_frames" not in a.facts.__dict__   # never built for the built-in packs

    found = evaluate(a, [parse_pack(PACK)], ())
    calls = a.facts.calls.filter(a.facts.calls["kind"].cast(str) == "sync")
    expected = sum(1 for sid in calls["stack_id"].to_list()
                   if sid is not None and any(
                       f.endswith("gpt_decode_server.py:generate")
                       for f in python_frames(a.data, sid)))
    assert expected > 0
    assert [f.occurrence_count for f in found] == [expected]
    assert "frames" in a.relations.sites.columns
    # each site's text is its own Python frames, outermost first, closed by ";"
    sites = a.facts.sites_with_frames.filter(a.facts.sites_with_frames["site_id"].is_not_null())
    for sid, site, text in sites.select("stack_id", "site_id", "frames").head(300).iter_rows():
        frames = python_frames(a.data, site)
        assert text == ("".join(f";{f}" for f in frames) + ";" if frames else "")
