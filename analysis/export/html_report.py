"""`zym report`: one self-contained HTML page to share what a capture shows.

The page has the capture summary, the findings (site, evidence, fix), the top call paths, and an
interactive GPU-time flamegraph of the call-path graph (click to zoom, search, hover for
numbers). Everything is inline: styles, script and data (JSON in a ``<script
type="application/json">`` element, with ``<`` escaped). It loads no fonts, scripts or images,
so it opens offline and from a mail attachment. Text is escaped server-side and inserted with
``textContent`` client-side: names from a trace cannot inject markup.

>>> html = render_report(load_export_source("trace.json.gz"))   # doctest: +SKIP
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from html import escape
from pathlib import Path

import numpy as np

from ..callpath import UNKNOWN_STACK
from ..trie import NONE
from .flamegraph import frame_label
from .report_assets import SCRIPT, STYLE
from .source import ExportSource

MIN_FLAME_SHARE = 1e-4  # flamegraph nodes under this share of GPU time are merged away
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def flame_tree(src: ExportSource) -> dict:
    """The call-path graph as nested ``{n: label, v: GPU ns, k: kind, f: file:line, c: [...]}``,
    with each path's GPU operations as leaves; nodes below :data:`MIN_FLAME_SHARE` dropped."""
    graph = src.analysis.call_paths.graph
    total = graph.total_gpu_ns()
    floor = total * MIN_FLAME_SHARE
    ops: dict[int, list[dict]] = {}
    for sid, name, kind, ns, count in src.analysis.call_paths.gpu_ops.select(
            "stack_id", "name", "kind", "gpu_ns", "count").iter_rows():
        if ns >= floor and kind != "sync":  # sync records time host waits, not GPU work
            ops.setdefault(UNKNOWN_STACK if sid is None else sid, []).append(
                {"n": name, "v": int(ns), "k": kind, "f": f"{count:,} ops", "c": []})

    # Only nodes at or above the floor are visited (a node's total is at least each child's):
    # a few thousand, however many stack nodes the capture has.
    trie, totals = graph.trie, graph.total_gpu_ns_of
    shown = np.flatnonzero((totals >= floor) & (totals > 0))
    kids: dict[int, list[int]] = {}
    for r, up in zip(shown.tolist(), trie.parent[shown].tolist()):
        kids.setdefault(up, []).append(r)
    ids = trie.ids.tolist()

    def build(row: int) -> dict:
        a = graph.node(ids[row])
        children = [build(c) for c in kids.get(row, [])]
        children += sorted(ops.get(ids[row], []), key=lambda x: -x["v"])
        children.sort(key=lambda x: -x["v"])
        where = f"{a['file']}:{a['line']}" if a.get("file") else ""
        return {"n": frame_label(a["name"], a["file"], a["line"], a["kind"]),
                "v": int(a["total_gpu_ns"]), "k": a["kind"] or "", "f": where, "c": children}

    roots = [build(r) for r in sorted(kids.get(NONE, []), key=lambda r: ids[r])]
    return {"n": "all GPU time", "v": int(total), "k": "root", "f": "", "c": roots}


def report_data(src: ExportSource, top: int = 15) -> dict:
    """Everything the page shows, as JSON-ready data: ``zym analyze``'s report (the same
    findings in the same order, with the same counts and savings) and the flamegraph."""
    from .summary import build_report

    d = build_report(src.analysis, src.found, top, examples=5)
    return d | {"flame": flame_tree(src),
                "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def _ms(ns) -> str:
    ns = ns or 0
    return f"{ns / 1e6:,.2f} ms" if ns >= 100_000 else f"{ns / 1e3:,.1f} µs"


def _summary_html(d: dict) -> str:
    c, g = d["capture"], d["gpu"]
    gpus = ", ".join(f"GPU {x.get('id')}: {x.get('name')}" for x in c.get("gpus") or []) or "—"
    busy = "; ".join(f"GPU {x['device_id']} busy {x['busy_pct']:.1f}% ({_ms(x['busy_ns'])}), "
                     f"idle {_ms(x['idle_ns'])}" for x in g.get("devices", [])) or "no GPU work"
    from .summary import (
        capture_sample_line,
        cut_short_line,
        phase_line,
        replay_notes,
        rest_line,
        sample_line,
        sample_notes,
    )

    together = d.get("fixes_together") or {}
    saving = ("—" if together.get("saving_ns") is None else
              f"~{_ms(together['saving_ns'])} of the window"
              + (f" ({together['saving_pct_of_window']:.1f}%)"
                 if together.get("saving_pct_of_window") is not None else "")
              + (f"; {rest_line(together)}" if rest_line(together) else ""))
    rows = [("Capture", Path(str(c["source"])).name), ("Producer", c.get("producer") or "—"),
            ("Host", c.get("host") or "—"), ("GPUs", gpus),
            ("Analyzed", phase_line(d.get("phases") or {}) or _ms(g.get("window_ns"))),
            ("GPU", busy),
            ("GPU time attributed to a call path", _ms(g.get("attributed_ns"))),
            ("Work", (f"{c['kernels']:,} kernels, {c['copies']:,} copies, {c['memsets']:,} "
                      f"memsets from {c['calls']:,} CUDA calls on {c['processes']:,} "
                      f"process(es), {c['threads']:,} thread(s); {c['paths']:,} call paths")),
            ("All fixes together save", saving)]
    if d.get("sample"):  # a capture too large for the memory budget: said first
        rows.insert(1, ("Sampled", capture_sample_line(d["sample"])))
        rows[2:2] = sample_notes(d["sample"])
    if c.get("cut_short"):  # a trace cut short: said before anything else
        rows.insert(1, ("Cut short", cut_short_line(c["cut_short"])))
    sample = (d.get("replay") or {}).get("sample")
    if sample:
        rows.append(("Fixes replayed on", sample_line(sample)))
    rows += [(title, said) for title, said, _ in replay_notes(d.get("replay"))]
    if c.get("dropped"):
        rows.append(("Dropped events", ", ".join(f"{k}: {v:,}" for k, v in c["dropped"].items())))
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def _findings_html(findings: list[dict]) -> str:
    if not findings:
        return '<p class="none">No findings: no rule fired on this capture.</p>'
    from .summary import instead_text, saving_text

    out = []
    for i, f in enumerate(findings):
        ev = "".join(f"<tr><th>{escape(str(k))}</th><td>{escape(_fmt(k, v))}</td></tr>"
                     for k, v in (f.get("evidence") or {}).items())
        chain = " → ".join(escape(x) for x in f.get("user_chain") or [])
        out.append(
            f'<article class="finding sev-{escape(f["severity"] or "info")}" id="finding-{i}">'
            f'<header><span class="badge">{escape(f["severity"] or "")}</span>'
            f'<h3>{escape(f["title"] or f["rule_id"])}</h3>'
            f'<code class="rule">{escape(f["rule_id"])}</code></header>'
            f'<p class="site"><b>{i + 1}.</b> at <code>{escape(f["site"] or "")}</code> · '
            f'<b>{escape(saving_text(f))}</b> · observed {_ms(f.get("cost_ns"))}</p>'
            + (f'<pre class="source">{escape(f["source"])}</pre>' if f.get("source") else "")
            + f'<p>{escape(f["message"] or "")}</p>'
            + f'<p class="estimate">{escape(f.get("saving_how") or "")}</p>'
            + (f'<p class="estimate">{escape(instead_text(f))}: '
               f'{escape(f["saving_instead"]["saving_how"])}</p>' if instead_text(f) else "")
            + (f'<p class="fix"><b>Fix:</b> {escape(f["fix"])}</p>' if f.get("fix") else "")
            + (f'<details><summary>Evidence and call chain</summary>'
               f'<p class="chain">{chain}</p><table class="kv">{ev}</table></details>')
            + "</article>")
    return "".join(out)


def _fmt(key: str, value) -> str:
    if isinstance(value, int) and key.endswith("_ns"):
        return _ms(value)
    if isinstance(value, float):
        return f"{value:,.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _paths_html(paths: list[dict], metric: str) -> str:
    if not paths:
        return '<p class="none">None.</p>'
    head = ("<tr><th>#</th><th>Site (your code)</th><th>torch op</th><th>CUDA call</th>"
            "<th class=num>GPU time</th><th class=num>share</th><th class=num>kernels</th>"
            "<th class=num>CPU blocked</th><th>top GPU operation</th></tr>")
    rows = []
    for i, p in enumerate(paths, 1):
        top = p["gpu_ops"][0]["name"] if p["gpu_ops"] else ""
        rows.append(
            f"<tr><td>{i}</td><td><code>{escape(p['site'])}</code></td>"
            f"<td>{escape(p['torch_op'] or '')}</td><td>{escape(p['api'] or '')}</td>"
            f"<td class=num>{_ms(p['gpu_ns'])}</td><td class=num>{p['gpu_share_pct']:.1f}%</td>"
            f"<td class=num>{p['kernels']:,}</td><td class=num>{_ms(p['cpu_blocked_ns'])}</td>"
            f"<td class=op title=\"{escape(top)}\">{escape(top)}</td></tr>")
    return f'<table class="paths" data-metric="{metric}">{head}{"".join(rows)}</table>'


def _baseline_html(diff: dict | None) -> str:
    """The comparison with a baseline capture (``zym report --baseline``), as ``zym diff``
    reports it: totals per step, call sites changed above noise, findings that changed."""
    if diff is None:
        return ""
    from .diff import MEASURE_NAMES, fmt_delta, fmt_value, headline

    def rows(items: list[dict]) -> str:
        return "".join(
            f"<tr><td><code>{escape(str(x['site']))}</code>"
            + (f" <small>(was {escape(str(x['site_before']))})</small>"
               if x["status"] == "matched" and x["site_before"] != x["site_after"] else "")
            + ("" if x["status"] == "matched" else f" <small>[{escape(x['status'])}]</small>")
            + "</td><td>" + escape(", ".join(f"{MEASURE_NAMES[m]} {fmt_delta(x['measures'][m])}"
                                             for m in x["changed"])) + "</td></tr>"
            for x in items) or '<tr><td colspan="2" class="none">None.</td></tr>'

    totals = "".join(
        f"<tr><th>{escape(MEASURE_NAMES[t['measure']])}</th>"
        f"<td class=num>{escape(fmt_value(t['before'], t['unit']))}</td>"
        f"<td class=num>{escape(fmt_value(t['after'], t['unit']))}</td>"
        f"<td class=num>{escape(fmt_delta(t))}</td>"
        f"<td class=num>±{escape(fmt_value(t['threshold'], t['unit']))}</td>"
        f"<td>{'<b>above noise</b>' if t['above_noise'] else ''}</td></tr>"
        for t in diff["totals"] if t["before"] or t["after"])
    f = diff["findings"]
    changes = [("gone", x["rule_id"], x["site"]) for x in f["disappeared"]] + \
        [("new", x["rule_id"], x["site"]) for x in f["appeared"]] + \
        [("changed", x["rule_id"], x["site"]) for x in f["changed"]]
    found = "".join(f"<li><b>{escape(k)}</b> <code>{escape(str(r))}</code> at "
                    f"<code>{escape(str(site))}</code></li>" for k, r, site in changes)
    head = "".join(f"<li>{escape(x)}</li>" for x in headline(diff))
    return f"""<section id="baseline"><h2>Compared with the baseline <small>per {escape(
        diff['per'])}, as zym diff reports it</small></h2><ul class="diff-head">{head}</ul>
<table class="paths"><tr><th>per {escape(diff['per'])}</th><th class=num>baseline</th>
<th class=num>this capture</th><th class=num>change</th><th class=num>noise</th><th></th></tr>
{totals}</table>
<h3>Improvements (call sites, above noise)</h3><table class="paths">{rows(
        diff['top_improvements'])}</table>
<h3>Regressions (call sites, above noise)</h3><table class="paths">{rows(
        diff['top_regressions'])}</table>
<h3>Findings</h3><ul>{found or '<li class="none">No finding appeared, disappeared or changed.</li>'}
</ul></section>"""


def render_report(src: ExportSource, top: int = 15, diff: dict | None = None) -> str:
    """The report page as one HTML string; ``diff``: ``zym diff``'s comparison with a baseline
    (:meth:`zym.analysis.diff.Diff.to_dict`), shown in its own section."""
    d = report_data(src, top)
    name = Path(str(d["capture"]["source"])).name
    data = json.dumps({"flame": d["flame"]}, separators=(",", ":"), default=str)
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    n = len(d["findings"])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>zym report: {escape(name)}</title><style>{STYLE}</style></head>
<body>
<header class="top"><h1>zym report <span>{escape(name)}</span></h1>
<nav><a href="#summary">Summary</a>{'<a href="#baseline">Baseline</a>' if diff else ''}<a href="#findings">What to fix first ({n})</a>
<a href="#flamegraph">GPU-time flamegraph</a><a href="#paths">Top call paths</a></nav></header>
<main>
<section id="summary"><h2>Summary</h2>{_summary_html(d)}</section>
{_baseline_html(diff)}
<section id="findings"><h2>What to fix first <small>{n} findings, ranked by what fixing
each saves (as zym analyze ranks them)</small></h2>
{_findings_html(d["findings"])}</section>
<section id="flamegraph"><h2>GPU-time flamegraph <small>Python → torch op → CUDA call →
GPU operation; width is GPU time. Click a frame to zoom, click the top bar to zoom out.</small>
</h2>
<div class="flame-tools"><input id="flame-search" type="search"
placeholder="Highlight frames matching…" aria-label="search frames">
<span id="flame-status"></span></div>
<div id="flame" role="img" aria-label="GPU-time flamegraph"></div>
<div id="flame-tip" hidden></div></section>
<section id="paths"><h2>Top call paths by GPU time</h2>
{_paths_html(d["paths_by_gpu_time"], "gpu")}
<h2>Top call paths by CPU time blocked in CUDA calls</h2>
{_paths_html(d["paths_by_cpu_blocked"], "blocked")}</section>
</main>
<footer>Generated by zym on {escape(d["generated_at"])} from {escape(str(d["capture"]["source"]))}.
This page is self-contained: it loads nothing from the network.</footer>
<script type="application/json" id="zym-data">{data}</script>
<script>{SCRIPT}</script>
</body></html>
"""


def write_report(src: ExportSource, out: Path, top: int = 15, diff: dict | None = None) -> int:
    html = render_report(src, top, diff)
    out.write_text(html, encoding="utf-8")
    return len(html.encode())
