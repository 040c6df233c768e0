"""Predicted vs measured: what zym says each fix saves, from a capture of a workload's
baseline, beside what applying the fix in the source saved on the H200.

    python bench/whatif/compare.py [RESULTS_DIR] [--json OUT] [--markdown]

RESULTS_DIR (default ``bench/whatif/results/h200``) holds, per workload W:

* ``W.measure.json``: interleaved timed passes of every variant (``harness.py W measure``);
  a variant's ``fix`` text starts with the rule id whose fix it applies
  (``"compute.fp32-matmul-no-tf32: ..."``, optionally ``"rule (HtoD): ..."``, or
  ``"rule (instead): ..."`` where the variant applies the second fix the finding prices,
  its ``saving_instead``);
* ``captures/W.parquet``: a ``zym capture`` of the baseline (eBPF + CUPTI);
* ``kineto/W.trace.json.gz``: a torch.profiler trace of the baseline, where there is one
  (``kineto/W.parquet``: the trace as `zym import` wrote it, kept in its place for size).

The measured saving of a variant is the median over rounds of (baseline pass - variant pass)
of the same round (arms interleaved in a shuffled order each round), per request; its spread
is the 25th-75th percentile of those paired differences. The predicted saving is the
finding's ``saving_ns`` over the analyzed (steady-state) window, divided by the steps in it.
A measured saving whose spread includes zero is noise: it cannot be ordered or checked within
±30%; a prediction for it agrees when it lies inside the spread.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "h200"
# requests per pass of each workload (bench/whatif/workloads/W.py: Service.requests)
REQUESTS = {"gpt_decode": 7, "rerank": 12, "decode_loop": 6}
TOLERANCE = 0.30
# "rule.id (HtoD): text", or "rule.a+rule.b: text" / "rule.id (all): text" for a variant applying
# several findings' fixes (every finding of those rules), "rule.id (all TEXT): text" for every
# finding of the rule whose site contains TEXT
RULE_FIX = re.compile(r"([a-z_]+\.[a-z0-9-]+(?:\+[a-z_]+\.[a-z0-9-]+)*)(?: \(([^)]*)\))?:")


@dataclass
class Row:
    workload: str
    source: str  # "zym capture" | "torch.profiler"
    variant: str
    rule_id: str
    rank: int | None  # the finding's rank in zym's list (1 = first), None: no finding
    predicted_ms: float | None  # per step
    predicted_pct: float | None  # of the captured step
    measured_ms: float  # per step, median of paired differences
    measured_lo_ms: float
    measured_hi_ms: float
    measured_pct: float  # of the baseline's median step
    base_ms: float
    captured_step_ms: float | None

    @property
    def noise(self) -> bool:
        return self.measured_lo_ms <= 0 <= self.measured_hi_ms

    @property
    def agrees(self) -> bool | None:
        if self.predicted_ms is None:
            return None
        if self.noise:
            return self.measured_lo_ms <= self.predicted_ms <= self.measured_hi_ms
        return abs(self.predicted_ms - self.measured_ms) <= TOLERANCE * abs(self.measured_ms)


def measured(doc: dict, requests: int, labels: dict | None = None) -> dict[str, dict]:
    """Per variant: the fix text and the paired per-step saving (median, p25, p75), in ms.
    ``labels``: fix texts that replace the recorded ones (variant -> text)."""
    base = doc["variants"]["base"]["times_s"]
    out = {}
    for name, v in doc["variants"].items():
        v = v | ({"fix": labels[name]} if labels and name in labels else {})
        if name == "base" or not RULE_FIX.match(v["fix"]):
            continue  # the baseline, and variants that name no rule
        diffs = [(b - t) * 1e3 / requests for b, t in zip(base, v["times_s"], strict=True)]
        q = statistics.quantiles(diffs, n=4)
        out[name] = {"fix": v["fix"], "ms": statistics.median(diffs), "lo": q[0], "hi": q[2]}
    return out


def rule_of(fix: str) -> tuple[str, str | None]:
    """``"rule.id (HtoD): text"`` -> ("rule.id", "HtoD")."""
    m = RULE_FIX.match(fix)
    if not m:
        raise ValueError(f"variant fix text does not start with a rule id: {fix!r}")
    return m.group(1), m.group(2)


def predictions(path: Path) -> tuple[list[dict], int, float, object]:
    """zym's findings on ``path`` (steady-state window, default rules), the steps in the
    window, the captured step's mean length in ms, and what a set of rules' fixes save
    together (a function of the rule ids: one replay with all their findings' edits)."""
    from zym.analysis import analyze
    from zym.analysis.export.summary import build_report
    from zym.rules import evaluate
    from zym.rules.whatif import what_if

    result = analyze(path)
    findings = evaluate(result)
    report = build_report(result, findings, None)
    steps = (report["phases"]["steps"] or {}).get("in_window") or 1

    def together(rules: list[str], site: str = "") -> tuple[int | None, int | None]:
        """Saving in ns of every finding of ``rules`` (whose site contains ``site``) fixed at
        once (rules without such a finding here are left out), and the best rank among them;
        (None, None) if none has one."""
        def mine(f, r: str) -> bool:
            return f.rule_id == r and f.edit is not None and site in f.site
        have = [r for r in rules if any(mine(f, r) for f in findings)]
        if not have:
            return None, None
        ranks = [i for i, f in enumerate(findings, 1) if any(mine(f, r) for r in have)]
        specs = [f"{r}@{site}" if site else r for r in have]
        return what_if(result, findings, specs)["saving_ns"], min(ranks)

    return report["findings"], steps, report["phases"]["window_ns"] / steps / 1e6, together


def compare(results: Path = RESULTS, requests_of: dict[str, int] | None = None) -> list[Row]:
    rows = []
    labels_file = results / "labels.json"
    labels = json.loads(labels_file.read_text())["variants"] if labels_file.exists() else {}
    for w, requests in (requests_of or REQUESTS).items():
        doc = json.loads((results / f"{w}.measure.json").read_text())
        meas = measured(doc, requests, labels.get(w))
        base_ms = doc["variants"]["base"]["median_s"] * 1e3 / requests
        sources = [("zym capture", results / "captures" / f"{w}.parquet"),
                   ("torch.profiler", results / "kineto" / f"{w}.trace.json.gz"),
                   ("torch.profiler", results / "kineto" / f"{w}.parquet")]
        for source, path in sources:
            if not path.exists():
                continue
            findings, steps, step_ms, together = predictions(path)
            for variant, m in meas.items():
                rule, qualifier = rule_of(m["fix"])
                if "+" in rule or qualifier == "all":   # several findings' fixes at once
                    saving, rank = together(rule.split("+"))   # (one replay of them all)
                    pred = None if saving is None else saving / steps / 1e6
                elif qualifier and qualifier.startswith("all "):  # every finding of the rule
                    # whose site names the text (a capture's upload loop, one per line)
                    saving, rank = together([rule], qualifier.removeprefix("all "))
                    pred = None if saving is None else saving / steps / 1e6
                else:
                    ranked = [(i, f) for i, f in enumerate(findings, 1) if f["rule_id"] == rule]
                    if qualifier and qualifier != "instead":  # e.g. HtoD: the finding
                        # whose words name it
                        ranked = [(i, f) for i, f in ranked
                                  if qualifier in f["message"] + f["title"]] or ranked
                    rank, f = ranked[0] if ranked else (None, None)
                    if qualifier == "instead":  # the variant is the finding's second fix
                        f = f and f.get("saving_instead")
                    pred = (f["saving_ns"] / steps / 1e6
                            if f is not None and f["saving_ns"] is not None else None)
                rows.append(Row(w, source, variant,
                                rule + (" (instead)" if qualifier == "instead" else ""), rank, pred,
                                None if pred is None else 100 * pred / step_ms,
                                m["ms"], m["lo"], m["hi"], 100 * m["ms"] / base_ms, base_ms,
                                step_ms))
    return rows


def order_agrees(rows: list[Row]) -> dict[tuple[str, str], bool]:
    """Per (workload, source): do the fixes with a measured saving beyond noise rank in the
    order of their measured savings?"""
    out = {}
    for key in sorted({(r.workload, r.source) for r in rows}):
        real = [r for r in rows if (r.workload, r.source) == key and not r.noise
                and "+" not in r.rule_id]   # single fixes: a combination outranks its parts
        by_measured = [r.variant for r in sorted(real, key=lambda r: -r.measured_ms)]
        by_rank = [r.variant for r in sorted(real, key=lambda r: (r.rank is None, r.rank or 0))]
        out[key] = by_measured == by_rank
    return out


def _ms(v: float | None) -> str:
    return "none" if v is None else f"{v:.2f}"


def markdown(rows: list[Row]) -> str:
    lines = [("| workload | analyzed | fix applied (variant) | zym's rank | predicted ms/step "
             "(% of captured step) | measured ms/step (p25-p75) (% of real step) | "
             "predicted / measured | within ±30% |"),
             "|---|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        ratio = ("-" if r.predicted_ms is None or r.noise or not r.measured_ms
                 else f"{r.predicted_ms / r.measured_ms:.2f}")
        verdict = {None: "no estimate", True: "yes", False: "no"}[r.agrees]
        if r.noise and r.agrees is not None:
            verdict = "inside the noise" if r.agrees else "no (measured: noise)"
        pct = "" if r.predicted_pct is None else f" ({r.predicted_pct:.1f}%)"
        lines.append(
            f"| {r.workload} | {r.source} | {r.variant} (`{r.rule_id}`) | {r.rank or '-'} | "
            f"{_ms(r.predicted_ms)}{pct} | {r.measured_ms:.2f} ({r.measured_lo_ms:.2f} to "
            f"{r.measured_hi_ms:.2f}) ({r.measured_pct:.1f}%) | {ratio} | {verdict} |")
    orders = order_agrees(rows)
    lines += ["", ("| workload | analyzed | real step ms (median) | captured step ms | predicted "
              "order = measured order (fixes beyond noise) |"), "|---|---|---:|---:|---|"]
    for (w, source), ok in orders.items():
        r = next(r for r in rows if (r.workload, r.source) == (w, source))
        lines.append(f"| {w} | {source} | {r.base_ms:.2f} | {_ms(r.captured_step_ms)} | "
                     f"{'yes' if ok else 'no'} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="?", type=Path, default=RESULTS)
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument("--markdown", action="store_true", help="print the docs table")
    p.add_argument("--requests", default="",
                   help="W=N,...: the workloads in RESULTS and their requests per pass "
                        "(default: " + ",".join(f"{w}={n}" for w, n in REQUESTS.items()) + ")")
    a = p.parse_args()
    requests_of = ({w: int(n) for w, n in (x.split("=") for x in a.requests.split(","))}
                   if a.requests else None)
    rows = compare(a.results, requests_of)
    if a.json:
        a.json.write_text(json.dumps([asdict(r) | {"agrees": r.agrees, "noise": r.noise}
                                      for r in rows], indent=1))
    if a.markdown:
        sys.stdout.write(markdown(rows))
    else:
        print("\n".join(map(str, rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
