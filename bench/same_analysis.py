"""Everything an analysis derives from the stack trie, dumped per input, and two dumps compared:
the report (rules on), the site table with every column (``frames`` too), `zym diff`'s code-site
identities, the HTML report's flame tree, the call-path graph (every node's attributes and
parent), the steps found and the compile activity.

Run it once with each install's Python (A, then B), then compare:

    /path/to/venv-a/bin/python bench/same_analysis.py dump OUT_A INPUT...
    /path/to/venv-b/bin/python bench/same_analysis.py dump OUT_B INPUT...
    python bench/same_analysis.py compare OUT_A OUT_B     # one line per input: SAME or what differs
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench_scale import write_json  # bench/: the script's folder
from same_report_spans import differences
from zym.schemas.errors import ZymError


def fail(message: str) -> None:
    print(f"same_analysis: {message}", file=sys.stderr)
    raise SystemExit(2)


def dump(path: Path) -> dict:
    import polars as pl
    from zym.analysis import profile
    from zym.analysis.export.html_report import flame_tree
    from zym.analysis.export.source import ExportSource
    from zym.analysis.export.summary import build_report
    from zym.analysis.report import analyze
    from zym.rules import evaluate, load_packs

    a = analyze(path)
    report = build_report(a, evaluate(a, load_packs(()), ()), None, 5, None)
    report["capture"].pop("source", None)
    sites = getattr(a.facts, "sites_with_frames", a.facts.sites).sort("stack_id")
    ident = profile.site_identity(a).sort("code_site")
    graph = a.call_paths.graph
    ph = a.phases
    return {
        "report": json.loads(json.dumps(report, default=str)),
        "sites": {c: sites[c].cast(pl.String).to_list() for c in sites.columns},
        "profile": ident.cast({c: pl.String for c in ident.columns}).to_dicts(),
        "flame": flame_tree(ExportSource(a, pl.DataFrame(), [])),
        "graph": {str(k): {kk: int(v) if isinstance(v, int) else v for kk, v in attrs.items()}
                  for k, attrs in graph.attrs.items()},
        "parent": {str(k): v for k, v in graph.parent.items()},
        "steps": None if ph.steps is None else [ph.steps.function, ph.steps.start_ns.tolist(),
                                                 ph.steps.end_ns.tolist(), ph.steps.source],
        "compile": [ph.compile_ns, ph.compile_calls],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("inputs", type=Path, nargs="+")
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = p.parse_args()
    if args.what == "dump":
        args.out.mkdir(parents=True, exist_ok=True)
        for path in args.inputs:
            if not path.exists():
                fail(f"{path}: no such file")
            name = str(path).strip("/").replace("/", "__") + ".json"
            try:
                got = dump(path)
            except ZymError as e:   # not a capture or trace zym reads: its one-line message
                fail(str(e))
            write_json(args.out / name, json.loads(json.dumps(got, default=str)))
            print(path, flush=True)
        return
    for folder in (args.a, args.b):
        if not folder.is_dir():
            fail(f"{folder}: not a folder of dumps")
    for f in sorted(args.a.glob("*.json")):
        g = args.b / f.name
        if not g.exists():
            print(f.name, "missing in", args.b)
            continue
        diff = differences(json.loads(f.read_text()), json.loads(g.read_text()))
        print(f.name, "SAME" if not diff else f"{len(diff)} differences: {diff[:6]}")


if __name__ == "__main__":
    main()
