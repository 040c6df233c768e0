"""Rendering of the report (``zym.analysis.export.summary.build_report``) for people: text for a
terminal or a CI log, and Markdown for a pull request. Only presentation lives here.

Text wraps at the console's width (at most 100 columns; 80 when piped) with hanging indents:
titles, messages and fixes are never cut. Every name from the capture is shown with control
characters escaped (``schemas.text.printable``) and, where rich parses markup, its brackets
escaped too (``markup``).
"""
from __future__ import annotations

import textwrap
from collections import Counter

from rich.console import Console
from rich.text import Text
from zym.analysis.export.summary import (
    capture_sample_line,
    cut_short_line,
    instead_text,
    phase_line,
    plural,
    replay_notes,
    rest_line,
    sample_line,
    sample_notes,
    saving_text,
)
from zym.analysis.units import fmt_bytes, fmt_ns
from zym.schemas.text import md_code, md_text, printable

MAX_WIDTH = 100
PIPED_WIDTH = 80
_SEVERITY_STYLE = {"error": ("✖", "bold red"), "warning": ("▲", "yellow"), "info": ("●", "cyan")}


def console_for_stdout() -> Console:
    """A console as wide as the terminal (at most :data:`MAX_WIDTH`), :data:`PIPED_WIDTH` when
    the output goes to a file or a CI log."""
    probe = Console()
    width = min(probe.width, MAX_WIDTH) if probe.is_terminal else PIPED_WIDTH
    return Console(width=width, highlight=False, soft_wrap=False)


def _wrap(console: Console, text: str, indent: int, first: str | None = None,
          style: str | None = None) -> None:
    """``text`` wrapped at the console width, every line indented by ``indent`` (the first by
    ``first`` when given). Long names break at the width rather than run past it."""
    pad = " " * indent
    lines = textwrap.wrap(text, width=max(console.width, 40), initial_indent=first or pad,
                          subsequent_indent=pad, break_on_hyphens=False) or [first or pad]
    for line in lines:
        console.print(Text(line, style=style or ""), soft_wrap=False)


# ---------------------------------------------------------------------------------------------
# Summary

def render_summary(report: dict, console: Console) -> None:
    cap, gpu, ph = report["capture"], report["gpu"], report.get("phases") or {}
    console.print(Text(f"zym · {cap['source']}", style="bold"))
    gpus = gpu_names(cap) or (
        "GPU names not recorded" if cap.get("gpu_ops") else "no GPU side recorded")
    versions = ", ".join(v if k in v else f"{k} {v}"  # "CUDA driver API 13.0" names itself
                         for k, v in (("driver", cap["driver_version"]),
                                      ("runtime", cap["runtime_version"])) if v)
    who = f"{plural(cap['processes'], 'process')}, {plural(cap['threads'], 'thread')}"
    _wrap(console, f"{cap['producer']} · {gpus}" + (f" ({versions})" if versions else "")
          + f" · {who}", 4, "  ")
    if cap.get("cut_short"):
        _wrap(console, cut_short_line(cap["cut_short"]), 4, "  ", style="bold yellow")
    if report.get("sample"):
        _wrap(console, capture_sample_line(report["sample"]), 4, "  ", style="bold yellow")
        for _, said in sample_notes(report["sample"]):
            _wrap(console, said, 4, "  ", style="yellow")
    _wrap(console, phase_line(ph), 4, "  ")
    ops = (f"{cap['gpu_ops']:,} GPU ops ({cap['kernels']:,} kernels, {cap['copies']:,} copies, "
           f"{cap['memsets']:,} memsets)")
    syncs = f" · {cap['sync_records']:,} sync records" if cap.get("sync_records") else ""
    _wrap(console, f"in the window: {cap['calls']:,} CUDA calls · {ops}{syncs} · "
                   f"{cap['paths']:,} call paths", 4, "  ")
    for d in gpu["devices"]:
        _wrap(console, f"GPU {d['device_id']} busy {fmt_ns(d['busy_ns'])} of "
                       f"{fmt_ns(gpu['window_ns'])} ({d['busy_pct']:.1f}%), idle "
                       f"{fmt_ns(d['idle_ns'])}", 4, "  ")
    if gpu["activity_ns"]:
        share = 100 * gpu["python_line_ns"] / gpu["activity_ns"]
        pathed = 100 * gpu["attributed_ns"] / gpu["activity_ns"]
        _wrap(console, f"{share:.1f}% of GPU time has its Python line"
              + (f" ({pathed:.1f}% has a call path of torch operators or CUDA calls)"
                 if pathed - share >= 0.05 else ""), 4, "  ",
              style=None if share >= 99.95 else "yellow")
    cost = cap.get("capture_cost")
    if cost:
        _wrap(console, "capture cost: " + _capture_cost(cost), 4, "  ")
    if any(cap["dropped"].values()):
        _wrap(console, f"dropped events: {cap['dropped']}", 4, "  ", style="yellow")
    for _, said, warn in replay_notes(report.get("replay")):
        _wrap(console, said, 4, "  ", style="yellow" if warn else None)


def _capture_cost(cost: dict) -> str:
    parts = []
    if cost.get("cupti_ns_per_call") is not None:
        how = "attached to the running process" if cost.get("cupti_started") == "attach" \
            else "started with the process"
        # CUPTI's part was measured on whole service processes on the H200 (6-11 µs a call
        # there; docs/benchmarks.md, "The capture's own cost on services"): it varies by service
        parts.append(f"~{fmt_ns(cost['total_ns_per_call'])} added per CUDA call "
                     f"(probes ~{fmt_ns(cost.get('added_ns_per_call') or 0)}, estimated here; "
                     f"CUPTI ~{fmt_ns(cost['cupti_ns_per_call'])}, {how}, as services on the "
                     "H200 measured it); taken out of the replay")
    elif cost.get("added_ns_per_call") is not None:
        parts.append(f"~{fmt_ns(cost['added_ns_per_call'])} added per CUDA call")
    if cost.get("window_pct") is not None:
        parts.append(f"~{cost['window_pct']:.2g}% of the analyzed window's time")
    elif cost.get("estimated_overhead_pct") is not None:
        parts.append(f"the probes ~{cost['estimated_overhead_pct']:.2g}% of the run")
    return ", ".join(parts) or ", ".join(f"{k} {v}" for k, v in cost.items())


def render_outside(report: dict, console: Console) -> None:
    """Startup and warm-up: one-time work, reported apart and not ranked."""
    ph = report.get("phases") or {}
    rows = [(name, ph[key]) for name, key in (("startup", "startup"), ("warm-up", "warmup"))
            if ph.get(key)]
    notes = ph.get("notes") or []
    if not rows and not notes:
        return
    console.print(Text("Outside the analyzed window (one-time work, not ranked)",
                       style="bold underline"))
    for name, part in rows:
        what = [f"{name} {fmt_ns(part['dur_ns'])}"]
        if part.get("bytes_htod"):
            what.append(f"{fmt_bytes(part['bytes_htod'])} copied to the GPU")
        if part.get("gpu_ns"):
            what.append(f"GPU busy {fmt_ns(part['gpu_ns'])}")
        if part.get("top_sites"):
            top = part["top_sites"][0]
            what.append(f"most at {top['site'] or '(no user frame)'} ({fmt_ns(top['cost_ns'])})")
        _wrap(console, ", ".join(what), 4, "  ")
    if ph.get("compile"):
        _wrap(console, f"compilation (torch.compile, Triton): "
                       f"{plural(ph['compile']['calls'], 'CUDA call')} over "
                       f"{fmt_ns(ph['compile']['span_ns'])}", 4, "  ")
    for note in notes:
        _wrap(console, note, 4, "  ", style="dim")


# ---------------------------------------------------------------------------------------------
# Findings

def _sentence(text: str) -> str:
    """``text`` with its first letter capitalised, the rest as it is (``str.capitalize``
    would lower a name's capitals)."""
    return text[:1].upper() + text[1:]


def render_findings(report: dict, console: Console, limit: int | None = None) -> None:
    """Findings ranked by what fixing them saves: the saving, severity and title; the site and
    its source line; what was observed; how the saving was estimated; the fix."""
    findings = report["findings"]
    shown = findings if limit is None else findings[:limit]
    together = report.get("fixes_together") or {}
    head = f"What to fix first: {plural(len(findings), 'finding')}"
    if together.get("saving_ns") is not None:
        head += (f"; all their fixes together save ~{fmt_ns(together['saving_ns'])} of the "
                 f"{fmt_ns(report['gpu']['window_ns'])} window")
        if together.get("saving_pct_of_window") is not None:
            head += f" ({together['saving_pct_of_window']:.1f}%"
            head += (f", {fmt_ns(together['saving_per_step_ns'])} a step)"
                     if together.get("saving_per_step_ns") is not None else ")")
    console.print(Text(head, style="bold underline"))
    rest = rest_line(together)
    if rest:
        _wrap(console, _sentence(rest) + ".", 2, "  ", style="dim")
    sample = (report.get("replay") or {}).get("sample")
    if sample and findings:
        _wrap(console, sample_line(sample), 2, "  ", style="dim")
    if not findings:
        console.print("  none: no rule fired")
    for i, f in enumerate(shown, 1):
        mark, _ = _SEVERITY_STYLE[f["severity"]]
        _wrap(console, f"{saving_text(f)}  {mark} {f['title']}", 6, f"{i:>2}. ", style="bold")
        _wrap(console, f["site"], 6, style="cyan")
        if f.get("source"):
            _wrap(console, f"│ {f['source']}", 6, style="dim")
        if f.get("called_from"):
            _wrap(console, f"called from your code at {f['called_from']}", 6, style="cyan")
        _wrap(console, f["message"], 6)
        if f.get("saving_ns") is not None:
            inc = f.get("saving_incremental_ns")
            after = (f" After the fixes above: ~{fmt_ns(inc)}."
                     if inc is not None and i > 1 and abs(inc - f["saving_ns"]) > 0.1 * max(
                         f["saving_ns"], 1) else "")
            _wrap(console, f"estimate: {f['saving_how']}.{after}", 6, style="dim")
        elif f.get("saving_how"):
            _wrap(console, f["saving_how"], 6, style="dim")
        if instead_text(f):
            _wrap(console, f"{instead_text(f)}; estimate: {f['saving_instead']['saving_how']}.",
                  6, style="dim")
        if f.get("also"):
            _wrap(console, "also: " + "; ".join(f["also"]), 6, style="dim")
        _wrap(console, f"fix: {f['fix']}  [{f['rule_id']}]", 6, style="green")
    if len(shown) < len(findings):
        console.print(Text(f"  … {len(findings) - len(shown)} more (--top, or --format json)",
                           style="dim"))


def render_what_if(what: dict, console: Console) -> None:
    console.print(Text("What if", style="bold underline"))
    for row in what["specs"]:
        _wrap(console, f"{row['spec']}: saves ~{fmt_ns(row['saving_ns'])}", 4, "  ",
              style="bold")
        _wrap(console, row["how"], 6, style="dim")
    pct = what.get("saving_pct_of_window")
    _wrap(console, f"together: saves ~{fmt_ns(what['saving_ns'])} of the "
                   f"{fmt_ns(what['window_ns'])} window"
                   + (f" ({pct:.1f}%)" if pct is not None else ""), 4, "  ", style="bold")


# ---------------------------------------------------------------------------------------------
# Paths and kernels

def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 1)] + "…"


def _chain(p: dict) -> str:
    """[innermost NVTX range] -> torch op -> API -> top GPU op, the part of a path below the
    user's line."""
    ranges = [f["name"] for f in p.get("stack") or () if f.get("kind") == "nvtx"]
    parts = [f"[{ranges[-1]}]" if ranges else None, p["torch_op"], p["api"]]
    if p["gpu_ops"]:
        more = len(p["gpu_ops"]) - 1
        parts.append(p["gpu_ops"][0]["name"] + (f" (+{more} more)" if more else ""))
    return " → ".join(x for x in parts if x)


def render_kernels(kernels: list[dict], console: Console) -> None:
    console.print(Text("Top kernels by GPU time", style="bold underline"))
    for i, k in enumerate(kernels, 1):
        what = "/".join(x for x in (k["op_class"], k["precision"]) if x)
        tc = {True: ", tensor cores", False: ", CUDA cores"}.get(k["tensor_core"], "")
        console.print(Text(f"{i:>3}  {fmt_ns(k['gpu_ns']):>9} {k['gpu_share_pct']:5.1f}%  "
                           f"{k['count']:,} × {fmt_ns(k['mean_ns'])}  {what}{tc}"), soft_wrap=False)
        console.print(Text(_clip("       " + k["name"], console.width), style="dim"),
                      soft_wrap=False)


def _print_path(line: Text, path: dict, console: Console) -> None:
    """A ranked path's line, wrapped, then its chain (dim, clipped to the width)."""
    for chunk in line.wrap(console, console.width):
        console.print(chunk, soft_wrap=False)
    console.print(Text(_clip("       " + _chain(path), console.width), style="dim"),
                  soft_wrap=False)


def render_paths_by_gpu(paths: list[dict], console: Console) -> None:
    console.print(Text("Top call paths by GPU time", style="bold underline"))
    for i, p in enumerate(paths, 1):
        what = ", ".join(f"{p[k]:,} {k}" for k in ("kernels", "copies", "memsets") if p[k])
        line = Text(f"{i:>3}  ")
        line.append(f"{fmt_ns(p['gpu_ns']):>9}", style="bold")
        line.append(f" {p['gpu_share_pct']:5.1f}%  ")
        line.append(p["site"], style="cyan")
        line.append(f"  ({what})")
        _print_path(line, p, console)


def render_paths_by_blocked(paths: list[dict], console: Console) -> None:
    console.print(Text("Top call paths by CPU time blocked (syncs and blocking copies)",
                       style="bold underline"))
    for i, p in enumerate(paths, 1):
        copied = sum(p["bytes"].values())
        per_call = fmt_ns(p["cpu_blocked_ns"] // max(p["calls"], 1))
        extra = f", {fmt_bytes(copied)} copied" if copied else ""
        line = Text(f"{i:>3}  ")
        line.append(f"{fmt_ns(p['cpu_blocked_ns']):>9}", style="bold")
        line.append("  ")
        line.append(p["site"], style="cyan")
        line.append(f"  ({p['calls']:,} calls, {per_call} each{extra})")
        _print_path(line, p, console)


def render_report(report: dict, console: Console, top: int | None = None) -> None:
    """The text report (see the module doc). ``top`` limits the findings and each ranking."""
    report = _printable(report)
    render_summary(report, console)
    console.print()
    ph = report.get("phases") or {}
    if ph.get("startup") or ph.get("warmup") or ph.get("notes"):
        render_outside(report, console)
        console.print()
    if "findings" in report:
        render_findings(report, console, top)
        console.print()
    if report.get("what_if"):
        render_what_if(report["what_if"], console)
        console.print()
    if report.get("top_kernels"):
        render_kernels(report["top_kernels"], console)
        console.print()
    if report["paths_by_gpu_time"]:
        render_paths_by_gpu(report["paths_by_gpu_time"], console)
    if report["paths_by_cpu_blocked"]:
        console.print()
        render_paths_by_blocked(report["paths_by_cpu_blocked"], console)


def _printable(value):
    """``value`` with every string made printable (iteratively deep: lists and dicts)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {k: _printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_printable(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Markdown, for pasting into a pull request or an issue

def _md(text: str) -> str:
    """Markdown-safe prose (names from the capture render no HTML and stay in their cell)."""
    return md_text(text)


def render_markdown(report: dict, top: int | None = None) -> str:
    """The report as GitHub-flavoured Markdown: findings table and details, then the paths."""
    cap, gpu, ph = report["capture"], report["gpu"], report.get("phases") or {}
    gpus = _md(gpu_names(cap) or ("GPU names not recorded" if cap.get("gpu_ops")
                                  else "no GPU side"))
    out = [f"## zym: {md_code(cap['source'])}", "",
           f"{_md(cap['producer'])} · {gpus} · {cap['calls']:,} CUDA calls · {cap['gpu_ops']:,} "
           f"GPU ops · window {fmt_ns(gpu['window_ns'])}"
           + "".join(f" · GPU {d['device_id']} busy {d['busy_pct']:.1f}%" for d in gpu["devices"]),
           "", _md(phase_line(ph)), ""]
    if cap.get("cut_short"):
        out[-1:-1] = ["", f"**{_md(cut_short_line(cap['cut_short']))}**"]
    if report.get("sample"):
        out[-1:-1] = ["", f"**{_md(capture_sample_line(report['sample']))}**"]
        for _, said in sample_notes(report["sample"]):
            out[-1:-1] = ["", _md(said)]
    for _, said, warn in replay_notes(report.get("replay")):
        out[-1:-1] = ["", f"**{_md(said)}**" if warn else _md(said)]
    findings = report.get("findings", [])
    shown = findings if top is None else findings[:top]
    together = report.get("fixes_together") or {}
    out += [f"### What to fix first ({len(findings)} findings)", ""]
    sample = (report.get("replay") or {}).get("sample")
    if sample and findings:
        out += [f"*{_md(sample_line(sample))}*", ""]
    if together.get("saving_ns") is not None:
        out += [f"All fixes together save ~{fmt_ns(together['saving_ns'])} of the "
                f"{fmt_ns(gpu['window_ns'])} window"
                + (f" ({together['saving_pct_of_window']:.1f}%)."
                   if together.get("saving_pct_of_window") is not None else ".")
                + (f" {_md(_sentence(rest_line(together)))}." if rest_line(together) else ""),
                ""]
    if shown:
        out += ["| | Saves | Severity | Site | Finding | Rule |", "|---|---:|---|---|---|---|"]
        for i, f in enumerate(shown, 1):
            out.append(f"| {i} | {_md(saving_text(f))} | {f['severity']} | {md_code(f['site'])} "
                       f"| {_md(f['title'])} | {md_code(f['rule_id'])} |")
        out.append("")
        for i, f in enumerate(shown, 1):
            head = (f"**{i}. {_md(f['title'])}** ({md_code(f['rule_id'])}, {f['severity']}) at "
                    f"{md_code(f['site'])}")
            out += [head, ""]
            if f.get("source"):
                out += [f"Line: {md_code(f['source'])}", ""]
            if f.get("called_from"):
                out += [f"Called from your code at {md_code(f['called_from'])}", ""]
            out += [_md(f["message"]), "", f"*{_md(saving_text(f))}:* {_md(f['saving_how'])}", ""]
            if instead_text(f):
                out += [(f"*{_md(_sentence(instead_text(f)))}:* "
                         f"{_md(f['saving_instead']['saving_how'])}"), ""]
            out += [f"*Fix:* {_md(f['fix'])}", ""]
            if f["user_chain"]:
                out += ["<details><summary>call chain</summary>", "",
                        *[f"{'  ' * d}- {md_code(frame)}" for d, frame in enumerate(f["user_chain"])],
                        "", "</details>", ""]
    elif not findings:
        out += ["No rule fired.", ""]
    if report.get("top_kernels"):
        out += ["### Top kernels by GPU time", "", "| GPU time | Share | Count | Class | Kernel |",
                "|---:|---:|---:|---|---|"]
        for k in report["top_kernels"]:
            cls = "/".join(x for x in (k["op_class"], k["precision"]) if x)
            out.append(f"| {fmt_ns(k['gpu_ns'])} | {k['gpu_share_pct']:.1f}% | {k['count']:,} | "
                       f"{_md(cls)} | {md_code(k['name'])} |")
        out.append("")
    out += ["### Top call paths by GPU time", "", "| GPU time | Share | Site | Chain |",
            "|---:|---:|---|---|"]
    for p in report["paths_by_gpu_time"]:
        out.append(f"| {fmt_ns(p['gpu_ns'])} | {p['gpu_share_pct']:.1f}% | {md_code(p['site'])} | "
                   f"{_md(_chain(p))} |")
    out += ["", "### Top call paths by CPU time blocked", "", "| Blocked | Calls | Site | Chain |",
            "|---:|---:|---|---|"]
    for p in report["paths_by_cpu_blocked"]:
        out.append(f"| {fmt_ns(p['cpu_blocked_ns'])} | {p['calls']:,} | {md_code(p['site'])} | "
                   f"{_md(_chain(p))} |")
    return "\n".join(out) + "\n"


def gpu_names(cap: dict) -> str:
    """The capture's GPUs by name, identical ones once with their count, in recorded order."""
    names = Counter(str(g.get("name", "?")) for g in cap["gpus"])
    return ", ".join(f"{n} × {name}" if n > 1 else name for name, n in names.items())
