"""`zym diff`: two captures compared, as text, Markdown (a PR comment), JSON and an HTML section.

:func:`diff_captures` loads and analyzes both captures (each as ``zym analyze`` does, rules
included), reduces each to its profile (:func:`zym.analysis.diff.profile_of`) and compares them
(:func:`zym.analysis.diff.compare`). The two captures are independent until the comparison, so
they are analyzed in two processes at once where that is safe (``jobs=2``: the second in a
forked child that sends back only its profile, a few hundred rows).

>>> d = diff_captures("before.json.gz", "after.json.gz")          # doctest: +SKIP
>>> print(render_text(d.to_dict(10)))                               # doctest: +SKIP
"""
from __future__ import annotations

import os
import pickle
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from zym.schemas.output import remove_temp_folders

from ..diff import HOST_FLOOR, Diff, Noise, Profile, compare, profile_of
from ..units import fmt_bytes, fmt_ns
from .summary import capture_sample_line, cut_short_line

Progress = Callable[[str], None]


def load_profile(path: str | Path, window: str = "steady", rules: bool = True,
                 rule_paths: Sequence[str | Path] = (), disabled: Sequence[str] = (),
                 progress: Progress | None = None, packs: Sequence | None = None,
                 budget: int | None = None, budget_given: bool = True) -> Profile:
    """Analyze a capture (``zym analyze``'s analysis and rules: the built-in packs, plugins
    and ``rule_paths``, or ``packs`` already loaded from them; in ``budget`` bytes, see
    :func:`zym.analysis.report.analyze`) and reduce it to its profile."""
    from ..report import analyze

    if rules and packs is None:
        from zym.rules import load_packs

        packs = load_packs(rule_paths)
    analysis = analyze(path, progress, window, budget, budget_given)
    found = None
    if rules:
        from zym.rules import evaluate

        # Each finding's own saving is compared; what the fixes save together (one more
        # replay) is the report's, not the comparison's.
        found = evaluate(analysis, packs, disabled, together=False, progress=progress)
    return profile_with_findings(analysis, found)


def profile_with_findings(analysis, found=None) -> Profile:
    """The profile of an analysis and its rule findings (``zym.rules.Findings``, or None)."""
    findings = None
    if found is not None:
        from .summary import window_scale

        win, steps = window_scale(analysis)
        findings = [f.to_dict(0, win, steps) for f in found]
    return profile_of(analysis, findings)


def diff_captures(before: str | Path, after: str | Path, window: str = "steady",
                  rules: bool = True, rule_paths: Sequence[str | Path] = (),
                  disabled: Sequence[str] = (), jobs: int = 1,
                  progress: Progress | None = None, repeat: str | Path | None = None,
                  host_floor: float = HOST_FLOOR) -> Diff:
    """Compare two captures (zym captures or torch.profiler traces, in any mix).

    ``jobs=2`` analyzes ``before`` in a forked child while this process analyzes ``after``,
    where forking is safe (:func:`start_profile`); else one after the other. ``repeat``: a
    second capture of the baseline's code, whose difference from ``before`` is the run-to-run
    noise; ``host_floor``: without it, the share of wall and CPU blocked time that is noise
    (:class:`zym.analysis.diff.Noise`)."""
    args = {"window": window, "rules": rules, "rule_paths": tuple(rule_paths),
            "disabled": disabled}
    pending = start_profile(before, jobs, **args)
    return finish_diff(pending, after, progress, repeat, host_floor)


def finish_diff(pending: Pending, after: str | Path, progress: Progress | None = None,
                repeat: str | Path | None = None, host_floor: float = HOST_FLOOR) -> Diff:
    """The comparison of ``pending`` (the baseline, see :func:`start_profile`) with ``after``
    (and with ``repeat``, a second run of the baseline, for the noise), each analyzed with
    the baseline's arguments and rule packs."""
    if progress:
        progress("analyzing the captures")
    if pending.forked:
        try:
            args = pending.with_packs()
            after_p = load_profile(after, progress=progress, **args)
        except BaseException:
            pending.cancel()
            raise
        before_p = pending.result(progress)
    else:
        args = pending.with_packs()
        before_p = pending.result(progress)
        after_p = load_profile(after, progress=progress, **args)
    again = None if repeat is None else load_profile(repeat, progress=progress, **args)
    if progress:
        progress("comparing")
    return compare(before_p, after_p, Noise(host_floor, again))


def diff_with_baseline(src, baseline: str | Path, top: int = 10, **args) -> Diff:
    """``zym report --baseline``: the report's own analysis (an :class:`ExportSource`, not
    analyzed again) compared with a baseline capture."""
    after_p = profile_of(src.analysis, src.findings if src.found is not None else None)
    before_p = load_profile(baseline, window=src.analysis.window_spec,
                            rules=src.found is not None, **args)
    return compare(before_p, after_p)


class Pending:
    """A baseline profile being built: in a forked child (``forked``), or on first
    :meth:`result` in this process."""

    def __init__(self, path: str | Path, args: dict, child: tuple[int, int] | None) -> None:
        self.path, self.args, self.child = path, args, child
        self.threads: bool | None = None  # the decoding threads' setting once the child is done

    def _child_done(self) -> None:
        from zym.capture import kineto_prefetch

        kineto_prefetch.set_decode_threads(self.threads)

    @property
    def forked(self) -> bool:
        return self.child is not None

    def with_packs(self) -> dict:
        """The arguments of an analysis here, with the rule packs loaded (once for every
        capture this process analyzes)."""
        if self.args.get("rules", True) and self.args.get("packs") is None:
            from zym.rules import load_packs

            self.args = self.args | {"packs": load_packs(self.args.get("rule_paths", ()))}
        return self.args

    def cancel(self) -> None:
        """End the child (its result is no longer wanted)."""
        if self.child is not None:
            import signal

            pid, read_fd = self.child
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_fd)
            self.child = None
            self._child_done()

    def result(self, progress: Progress | None = None) -> Profile:
        if self.child is None:
            return load_profile(self.path, progress=progress, **self.args)
        pid, read_fd = self.child
        with os.fdopen(read_fd, "rb") as src:
            data = src.read()
        os.waitpid(pid, 0)
        self._child_done()
        if not data:
            raise RuntimeError(f"{self.path}: the analysis process ended without a result")
        status, value = pickle.loads(data)
        if status == "error":
            raise _rebuilt(*value)
        return value


POOL_THREADS = re.compile(r"^(?:polars-\d+|tokio-rt-worker)$")  # started by a first query


def fork_is_safe() -> bool:
    """Whether this process can fork a child that runs polars: only before polars' thread pool
    has started (its first parallel query). A forked child has only the forking thread: polars
    would queue the child's work for pool threads that do not exist there, and wait forever.
    The threads polars and jemalloc start at import are fork-safe (jemalloc's fork handlers).
    Linux names threads in /proc; elsewhere there is no way to tell, so never fork."""
    try:
        tasks = os.listdir("/proc/self/task")
        names = [Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in tasks]
    except OSError:
        return False
    return not any(POOL_THREADS.match(n) for n in names)


def start_profile(path: str | Path, jobs: int = 1, **args) -> Pending:
    """Start building the profile of ``path``: in a forked child when ``jobs >= 2`` and
    :func:`fork_is_safe` (call it before this process runs a polars query), else later, in
    this process. With a child, the modules an analysis imports are imported before the
    fork, not in both processes (the rule packs cannot be: checking their patterns runs
    polars, which would make the fork unsafe)."""
    if jobs >= 2:
        _import_analysis(path)
    if jobs < 2 or not hasattr(os, "fork") or not fork_is_safe():
        return Pending(path, args, None)
    from zym.capture import kineto_prefetch

    # Two analyses at once take both cores: each decodes its trace without a pool of threads
    # (here until the child's result is in).
    threads = kineto_prefetch.set_decode_threads(False)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: analyze, send the profile (or the error), leave at once
        os.close(read_fd)
        code = 0
        try:
            try:
                payload = ("ok", load_profile(path, **args))
            except BaseException as e:  # noqa: BLE001 (carried to the parent, raised there)
                payload, code = ("error", (type(e), str(e))), 1
            data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write_fd, "wb") as out:
                out.write(data)
        finally:
            remove_temp_folders()  # its sample's (os._exit runs no exit handler)
            os._exit(code)
    os.close(write_fd)
    kineto_prefetch.handed_over(path)  # the child reads what was decoded ahead for it
    pending = Pending(path, args, (pid, read_fd))
    pending.threads = threads
    return pending


def _import_analysis(path: str | Path) -> None:
    """Import what analyzing ``path`` will (its reader, the analysis, the rules' engine and
    replays, the report): ~0.25 s that a forked child would otherwise spend again."""
    import importlib

    from zym.schemas.io import is_parquet

    names = ["zym.analysis.report", "zym.rules.engine", "zym.rules.savings",
             "zym.rules.packcheck", "yaml", "zym.analysis.export.summary",
             "zym.analysis.bundled", "zym.analysis.instances", "zym.analysis.throughput",
             "zym.schemas.validate",
             "numpy.ma"]  # polars imports it at its first Series made from a numpy array
    if not is_parquet(path):  # a torch.profiler trace (or no capture: the child says so)
        names += ["zym.capture.kineto", "email.parser"]  # its metadata reads zym's version
    for name in names:
        importlib.import_module(name)


def _rebuilt(kind: type, message: str) -> BaseException:
    """The child's exception, raised again here: its type and message (a ZymError stays a
    ZymError, so the command prints it as one line and exits 2)."""
    try:
        return kind(message)
    except Exception:  # noqa: BLE001 (a type that takes other arguments)
        return RuntimeError(f"{kind.__name__}: {message}")


# -- rendering ---------------------------------------------------------------------------------

MEASURE_NAMES = {
    "wall_ns": "wall time", "gpu_ns": "GPU time", "cpu_blocked_ns": "CPU blocked",
    "calls": "CUDA calls", "launches": "launches", "syncs": "syncs", "kernels": "kernels",
    "copies": "copies", "memsets": "memsets", "bytes_htod": "bytes HtoD",
    "bytes_dtoh": "bytes DtoH", "bytes_dtod": "bytes DtoD", "count": "count", "bytes": "bytes",
}


def fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ns":
        return fmt_ns(v)
    if unit == "bytes":
        return ("-" if v < 0 else "") + fmt_bytes(abs(v))
    return f"{v:,.1f}" if abs(v - round(v)) > 0.05 else f"{round(v):,}"


def fmt_delta(m: dict) -> str:
    sign = "+" if m["delta"] > 0 else "-" if m["delta"] < 0 else "±"
    body = fmt_value(abs(m["delta"]), m["unit"])
    pct = f" ({m['delta_pct']:+.1f}%)" if m.get("delta_pct") is not None else ""
    return f"{sign}{body}{pct}"


def headline(d: dict) -> list[str]:
    """The lines every rendering opens with: what was compared, and on what footing."""
    b, a = d["before"], d["after"]

    def side(p: dict) -> str:
        units = (f"{p['units']} steps of {p['steps_function']}" if p["unit"] == "step"
                 else f"{fmt_ns(p['window_ns'])} window")
        return f"{p['source']} ({p['producer'] or 'unknown producer'}; {units})"

    again = [f"repeat: {side(d['repeat'])}"] if d.get("repeat") else []
    sides = (("before", b), ("after", a), ("repeat", d.get("repeat")))
    sampled = [f"{name}: {capture_sample_line(p['sample'])}" for name, p in sides
               if p and p.get("sample")]
    sampled += [f"{name}: {cut_short_line(p['cut_short'])}" for name, p in sides
                if p and p.get("cut_short")]
    m = d["matched"]
    how = ", ".join(f"{n} by {k}" for k, n in m.items() if k not in ("appeared", "disappeared"))
    return [f"before: {side(b)}", f"after:  {side(a)}", *again,
            (f"call sites matched: {how or 'none'}; {m['appeared']} appeared, "
             f"{m['disappeared']} disappeared"),
            f"per {d['per']}; {d['noise']['how']}", *sampled]


def _site_change(s: dict) -> str:
    parts = [f"{MEASURE_NAMES[m]} {fmt_delta(s['measures'][m])}" for m in s["changed"]]
    where = s["site"] if s["status"] != "matched" or s["site_before"] == s["site_after"] \
        else f"{s['site_after']} (was {s['site_before']})"
    tag = "" if s["status"] == "matched" else f" [{s['status']}]"
    return f"{where}{tag}: " + ", ".join(parts)


def render_text(d: dict) -> str:
    """Plain text for a terminal or a CI log."""
    out = ["zym diff", *("  " + x for x in headline(d)), "", "Totals per " + d["per"]]
    for t in d["totals"]:
        if not t["before"] and not t["after"]:
            continue
        mark = "*" if t["above_noise"] else " "
        out.append(f" {mark} {MEASURE_NAMES[t['measure']]:<12} {fmt_value(t['before'], t['unit']):>10}"
                   f" -> {fmt_value(t['after'], t['unit']):>10}  {fmt_delta(t)}"
                   f"  (noise ±{fmt_value(t['threshold'], t['unit'])})")
    out.append("  (* above noise)")
    for title, key in (("Top improvements", "top_improvements"),
                       ("Top regressions", "top_regressions")):
        out += ["", f"{title} (sites, above noise)"]
        rows = d[key]
        out += [f"  {i}. {_site_change(s)}" for i, s in enumerate(rows, 1)] or ["  none"]
    kern = [k for k in d["kernels"] if k["above_noise"]]
    out += ["", "GPU operations changed above noise"]
    out += [f"  {k['name'][:90]} [{k['status']}]: GPU {fmt_delta(k['measures']['gpu_ns'])}, "
            f"count {fmt_delta(k['measures']['count'])}" for k in kern[:10]] or ["  none"]
    out += ["", "Findings"] + _finding_lines(d["findings"], d["per"]) + [""]
    return "\n".join(out)


def _finding_lines(f: dict, per: str = "unit") -> list[str]:
    out = []

    def noise(x: dict) -> str:
        return "" if x.get("above_noise") else "; the saving is within noise"

    for x in f["disappeared"]:
        out.append(f"  - gone: {x['rule_id']} at {x['site']} (saved ~"
                   f"{fmt_ns(x['saving_per_unit_ns'])} per {per} before{noise(x)})")
    for x in f["appeared"]:
        out.append(f"  + new: {x['rule_id']} at {x['site']} (saves ~"
                   f"{fmt_ns(x['saving_per_unit_ns'])} per {per}{noise(x)})")
    for x in f["changed"]:
        out.append(f"  ~ changed: {x['rule_id']} at {x['site']}: saving "
                   f"{fmt_ns(x['saving_before_ns'])} -> {fmt_ns(x['saving_after_ns'])}")
    if f["unchanged"]:
        out.append(f"  = {len(f['unchanged'])} unchanged")
    return out or ["  none"]


def _md(text) -> str:
    from zym.schemas.text import md_text

    return md_text(str(text))


def render_markdown(d: dict) -> str:
    """Markdown for a pull request comment."""
    from zym.schemas.text import md_code

    out = ["### zym diff", "", *[f"- {_md(x)}" for x in headline(d)], "",
           f"| per {d['per']} | before | after | change | noise | |",
           "| --- | ---: | ---: | ---: | ---: | --- |"]
    for t in d["totals"]:
        if not t["before"] and not t["after"]:
            continue
        out.append(f"| {MEASURE_NAMES[t['measure']]} | {fmt_value(t['before'], t['unit'])} | "
                   f"{fmt_value(t['after'], t['unit'])} | {fmt_delta(t)} | "
                   f"±{fmt_value(t['threshold'], t['unit'])} | "
                   f"{'**above noise**' if t['above_noise'] else ''} |")
    for title, key in (("Improvements", "top_improvements"), ("Regressions", "top_regressions")):
        rows = d[key]
        out += ["", f"#### {title} (call sites, above noise)", ""]
        if not rows:
            out.append("None.")
            continue
        out += ["| site | GPU time | CPU blocked | other changes |", "| --- | ---: | ---: | --- |"]
        for s in rows:
            m = s["measures"]
            other = ", ".join(f"{MEASURE_NAMES[c]} {fmt_delta(m[c])}" for c in s["changed"]
                              if c not in ("gpu_ns", "cpu_blocked_ns"))
            tag = "" if s["status"] == "matched" else f" ({s['status']})"
            out.append(f"| {md_code(str(s['site']))}{tag} | {fmt_delta(m['gpu_ns'])} | "
                       f"{fmt_delta(m['cpu_blocked_ns'])} | {_md(other)} |")
    out += ["", "#### Findings", ""] + _finding_items(d["findings"], d["per"])
    return "\n".join(out) + "\n"


def _finding_items(f: dict, per: str = "unit") -> list[str]:
    """The findings that changed, as a Markdown list."""
    from zym.schemas.text import md_code

    def item(what: str, x: dict, saving: str) -> str:
        noise = "" if x.get("above_noise") else "; the saving is within noise"
        return (f"- **{what}** {md_code(x['rule_id'])} at {md_code(str(x['site']))} "
                f"({_md(saving)}{noise})")

    out = [item("gone", x, f"saved ~{fmt_ns(x['saving_per_unit_ns'])} per {per} before")
           for x in f["disappeared"]]
    out += [item("new", x, f"saves ~{fmt_ns(x['saving_per_unit_ns'])} per {per}")
            for x in f["appeared"]]
    out += [item("changed", x | {"above_noise": True}, f"saving "
                 f"{fmt_ns(x['saving_before_ns'])} -> {fmt_ns(x['saving_after_ns'])}")
            for x in f["changed"]]
    if f["unchanged"]:
        out.append(f"- {len(f['unchanged'])} unchanged")
    return out or ["None changed."]
