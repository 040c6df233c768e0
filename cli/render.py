"""Rich rendering of an analysis for people. Only presentation lives here."""
from __future__ import annotations

from rich.console import Console
from rich.text import Text
from zym.analysis.units import fmt_bytes, fmt_ns
from zym.schemas.text import markup, printable


def render_summary(report: dict, console: Console) -> None:
    cap, gpu = report["capture"], report["gpu"]
    gpus = markup(", ".join(str(g.get("name", "?")) for g in cap["gpus"]) or "unknown GPU")
    versions = ", ".join(v if k in v else f"{k} {v}"  # "CUDA driver API 13.0" names itself
                         for k, v in (("driver", cap["driver_version"]),
                                      ("runtime", cap["runtime_version"])) if v)
    console.print(Text(f"zym · {cap['source']}", style="bold"))
    console.print(f"  {markup(cap['producer'])} · {gpus}" + (f" ({versions})" if versions else ""))
    console.print(f"  {cap['calls']:,} CUDA calls on {cap['threads']} thread(s) · "
                  f"{cap['gpu_ops']:,} GPU ops ({cap['kernels']:,} kernels, {cap['copies']:,} "
                  f"copies, {cap['memsets']:,} memsets) · {cap['paths']:,} call paths")
    line = f"  window {fmt_ns(gpu['window_ns'])} · GPU activity {fmt_ns(gpu['activity_ns'])}"
    for d in gpu["devices"]:
        line += (f" · GPU {d['device_id']} busy {fmt_ns(d['busy_ns'])} ({d['busy_pct']:.1f}%),"
                 f" idle {fmt_ns(d['idle_ns'])}")
    console.print(line)
    if gpu["activity_ns"] and gpu["attributed_ns"] < gpu["activity_ns"]:
        share = 100 * gpu["attributed_ns"] / gpu["activity_ns"]
        console.print(f"  [yellow]{share:.1f}% of GPU time has a call stack[/yellow]")
    if any(cap["dropped"].values()):
        console.print(f"  [yellow]dropped events: {cap['dropped']}[/yellow]")


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 1)] + "…"


def _chain(p: dict) -> str:
    """torch op -> API -> top GPU op, the part of a path below the user's line."""
    parts = [p["torch_op"], p["api"]]
    if p["gpu_ops"]:
        more = len(p["gpu_ops"]) - 1
        parts.append(p["gpu_ops"][0]["name"] + (f" (+{more} more)" if more else ""))
    return " → ".join(x for x in parts if x)


def render_paths_by_gpu(paths: list[dict], console: Console) -> None:
    console.print(Text("Top call paths by GPU time", style="bold underline"))
    for i, p in enumerate(paths, 1):
        what = ", ".join(f"{p[k]:,} {k}" for k in ("kernels", "copies", "memsets") if p[k])
        console.print(f"{i:>3}  [bold]{fmt_ns(p['gpu_ns']):>9}[/bold] {p['gpu_share_pct']:5.1f}%"
                      f"  [cyan]{markup(p['site'])}[/cyan]  ({what})", highlight=False)
        console.print(Text(_clip("       " + _chain(p), console.width), style="dim"))


def render_paths_by_blocked(paths: list[dict], console: Console) -> None:
    console.print(Text("Top call paths by CPU time blocked (syncs and copies)",
                       style="bold underline"))
    for i, p in enumerate(paths, 1):
        copied = sum(p["bytes"].values())
        per_call = fmt_ns(p["cpu_blocked_ns"] // max(p["calls"], 1))
        extra = f", {fmt_bytes(copied)} copied" if copied else ""
        console.print(f"{i:>3}  [bold]{fmt_ns(p['cpu_blocked_ns']):>9}[/bold]  "
                      f"[cyan]{markup(p['site'])}[/cyan]  ({p['calls']:,} calls, {per_call} each{extra})",
                      highlight=False)
        console.print(Text(_clip("       " + _chain(p), console.width), style="dim"))


_SEVERITY_STYLE = {"error": ("✖", "bold red"), "warning": ("▲", "yellow"), "info": ("●", "cyan")}


def finding_cost(f: dict) -> str:
    return fmt_ns(f["cost_ns"]) if f["cost_ns"] else "-"


def render_findings(findings: list[dict], console: Console, limit: int | None = None) -> None:
    """Findings ranked by cost: severity, cost, site and title; the message; the fix."""
    shown = findings if limit is None else findings[:limit]
    console.print(Text(f"Findings ({len(findings)})", style="bold underline"))
    if not findings:
        console.print("  none: no rule fired")
    for f in shown:
        mark, style = _SEVERITY_STYLE[f["severity"]]
        head = Text("  ")
        head.append(f"{mark} {f['severity']:<7}", style=style)
        head.append(f" {finding_cost(f):>9}  ", style="bold")
        head.append(f["site"], style="cyan")
        head.append(f"  {f['title']}")
        head.truncate(console.width, overflow="ellipsis")
        console.print(head)
        # Narrow terminals get one line per part; --format markdown/json keep everything.
        message = "      " + f["message"]
        console.print(Text(message if console.width >= 100 else _clip(message, console.width)),
                      highlight=False)
        console.print(Text(_clip(f"      fix: {f['fix']}", console.width - len(f["rule_id"]) - 5),
                           style="green").append(f"  [{f['rule_id']}]", style="dim"),
                      highlight=False)
    if len(shown) < len(findings):
        console.print(Text(f"  … {len(findings) - len(shown)} more (--top, or --format json)",
                           style="dim"))


def render_report(report: dict, console: Console) -> None:
    """The text report. Every name from the capture is shown with control characters escaped
    (``schemas.text.printable``: no terminal escape sequence gets through), and where a line
    is rich markup, with its brackets escaped too (``markup``)."""
    report = _printable(report)
    render_summary(report, console)
    console.print()
    if "findings" in report:
        render_findings(report["findings"], console, len(report["paths_by_gpu_time"]) or None)
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
    from zym.schemas.text import md_text

    return md_text(text)


def render_markdown(report: dict) -> str:
    """The report as GitHub-flavoured Markdown: findings table and details, then the paths."""
    from zym.schemas.text import md_code

    cap, gpu = report["capture"], report["gpu"]
    gpus = _md(", ".join(str(g.get("name", "?")) for g in cap["gpus"]) or "unknown GPU")
    out = [f"## zym: {md_code(cap['source'])}", "",
           f"{cap['producer']} · {gpus} · {cap['calls']:,} CUDA calls · {cap['gpu_ops']:,} GPU "
           f"ops · window {fmt_ns(gpu['window_ns'])}"
           + "".join(f" · GPU {d['device_id']} busy {d['busy_pct']:.1f}%" for d in gpu["devices"]),
           ""]
    findings = report.get("findings", [])
    out += [f"### Findings ({len(findings)})", ""]
    if findings:
        out += ["| | Severity | Cost | Site | Finding | Rule |", "|---|---|---:|---|---|---|"]
        for i, f in enumerate(findings, 1):
            out.append(f"| {i} | {f['severity']} | {finding_cost(f)} | {md_code(f['site'])} | "
                       f"{_md(f['title'])} | {md_code(f['rule_id'])} |")
        out.append("")
        for i, f in enumerate(findings, 1):
            head = (f"**{i}. {_md(f['title'])}** ({md_code(f['rule_id'])}, {f['severity']}) at "
                    f"{md_code(f['site'])}")
            out += [head, "", _md(f["message"]), "", f"*Fix:* {_md(f['fix'])}", ""]
            if f["user_chain"]:
                out += ["<details><summary>call chain</summary>", "",
                        *[f"{'  ' * d}- {md_code(frame)}" for d, frame in enumerate(f["user_chain"])],
                        "", "</details>", ""]
    else:
        out += ["No rule fired.", ""]
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
