"""Run rule packs over an analysis: each rule is one lazy polars query over one relation.

filter (``where``) -> group (``group_by``) -> aggregate (standard + rule measures) -> derive
-> threshold (``having``) -> findings, ranked by cost. Occurrences are the filtered rows of the
firing groups (a semi-join), never a Python loop over events.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from .compile import aggregation, derived, having_expr, render, where_expr
from .findings import OCCURRENCE_COLUMNS, Finding
from .model import SEVERITY_RANK, Pack, Rule, RuleError
from .relations import COLUMNS, OCCURRENCE, STANDARD_MEASURES, Relations

if TYPE_CHECKING:
    from zym.analysis import Analysis

DEFAULT_COST = {"calls": "stall_ns", "gpu": "gpu_ns", "gaps": "idle_ns", "windows": "window_ns"}
# Columns carried from a group's first row into the finding (site, labels for messages).
_LABEL_COLUMNS = ("site_id", "user_node", "user_function", "user_file", "user_line",
                  "user_module", "torch_op", "py_api", "api", "copy_kind", "src_mem", "dst_mem",
                  "dtype", "name", "cause", "kind")


def evaluate_rules(analysis: Analysis, rules: Sequence[Rule],
                   relations: Relations | None = None) -> list[Finding]:
    """Findings of ``rules`` on ``analysis``, most costly first (ties: severity, rule id)."""
    rel = relations or Relations(analysis)
    findings: list[Finding] = []
    for rule in rules:
        findings.extend(run_rule(rule, rel))
    findings = _apply_supersedes(findings, rules)
    findings.sort(key=lambda f: (-f.cost_ns, -SEVERITY_RANK[f.severity], f.rule_id, f.site))
    return findings


def run_rule(rule: Rule, rel: Relations) -> list[Finding]:
    df = rel.get(rule.relation)
    constants = {"total_gpu_ns": rel.total_gpu_ns, "window_ns": rel.window_ns}
    rows = df.lazy().filter(where_expr(rule.where)) if rule.where else df.lazy()
    keys = list(rule.group_by)
    aggs = [e.alias(n) for n, e in STANDARD_MEASURES[rule.relation].items()]
    aggs += [aggregation(n, s) for n, s in rule.measures.items() if "agg" in s]
    labels = [pl.col(c).drop_nulls().first().alias(f"_l_{c}") for c in _LABEL_COLUMNS
              if c in df.columns]
    grouped = (rows.group_by(keys, maintain_order=True).agg(*aggs, *labels) if keys
               else rows.select(*aggs, *labels))
    for name, spec in rule.measures.items():
        if "agg" not in spec:
            grouped = grouped.with_columns(derived(name, spec, constants))
    fired = grouped.filter((pl.col("count") > 0) & having_expr(rule.having)).collect()
    if fired.height == 0:
        return []
    occ = _occurrences(rows, fired, keys, rule.relation)
    cost = rule.cost or DEFAULT_COST[rule.relation]
    graph = rel.analysis.call_paths.graph
    out = []
    for row in fired.iter_rows(named=True):  # one row per finding: few, not per event
        key = tuple(row[k] for k in keys)
        frame = occ.get(key, _EMPTY_OCC) if keys else occ.get((), _EMPTY_OCC)
        out.append(_finding(rule, row, frame, cost, constants, graph))
    return out


_EMPTY_OCC = pl.DataFrame(schema={c: pl.Int64 for c in OCCURRENCE_COLUMNS})


def _occurrences(rows: pl.LazyFrame, fired: pl.DataFrame, keys: list[str], relation: str
                 ) -> dict[tuple, pl.DataFrame]:
    cols = OCCURRENCE[relation]
    if not keys:
        return {(): rows.select(cols).collect()}
    hit = rows.join(fired.lazy().select(keys), on=keys, how="semi", nulls_equal=True)
    frame = hit.select(*keys, *cols).collect()
    return {k: v.drop(keys) for k, v in frame.partition_by(keys, as_dict=True,
                                                            maintain_order=True).items()}


def _finding(rule: Rule, row: dict, occ: pl.DataFrame, cost: str, constants: dict,
             graph: Any) -> Finding:
    labels = {c: row.get(f"_l_{c}") for c in _LABEL_COLUMNS}
    for k in rule.group_by:
        labels[k] = row[k]
    site_id = labels.get("site_id")
    site = site_text(labels)
    measures = {k: v for k, v in row.items() if not k.startswith("_l_") and k not in rule.group_by}
    evidence = {k: _plain(v) for k, v in measures.items()}
    if "gpu_ns" in evidence and constants["total_gpu_ns"]:
        evidence["gpu_share"] = round(evidence["gpu_ns"] / constants["total_gpu_ns"], 4)
    if "idle_ns" in evidence and constants["window_ns"]:
        evidence["idle_share_of_window"] = round(evidence["idle_ns"] / constants["window_ns"], 4)
    for k in rule.group_by:
        evidence.setdefault(k, _plain(row[k]))
    values = measures | labels | constants | {"site": site, "what": _what(labels)}
    chain = []
    if site_id is not None and graph is not None:
        chain = [f"{f['file']}:{f['line']} {f['name']}" for f in graph.path(site_id)
                 if f.get("is_user")]
    return Finding(
        rule_id=rule.id, severity=rule.severity, title=render(rule.title, values),
        message=render(rule.message, values), site=site, user_chain=chain, evidence=evidence,
        fix=render(rule.fix, values), cost_ns=int(measures.get(cost) or 0), pack=rule.pack,
        site_id=site_id, occurrence_frame=occ)


def site_text(labels: dict) -> str:
    """``file:line function`` (``Module.forward`` inside an nn.Module) of a group's user frame."""
    if labels.get("user_function") is None:
        if labels.get("site_id") is None and labels.get("user_node") is None:
            return "(whole capture)"
        return "(no user frame)"
    function = labels["user_function"]
    if labels.get("user_module") and function == "forward":
        function = f"{labels['user_module']}.forward"
    return f"{labels['user_file']}:{labels['user_line']} {function}"


def _what(labels: dict) -> str:
    if labels.get("py_api"):
        return f"{labels['py_api']}()"
    return labels.get("torch_op") or labels.get("api") or labels.get("name") or "?"


def _plain(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 6)
    return v


def _apply_supersedes(findings: list[Finding], rules: Iterable[Rule]) -> list[Finding]:
    """Drop a finding when a more specific rule fired at the same site."""
    by_id = {r.id: r for r in rules}
    hidden = {(old, f.site_id) for f in findings for old in by_id[f.rule_id].supersedes
              if f.site_id is not None}
    return [f for f in findings if (f.rule_id, f.site_id) not in hidden]


def select_rules(packs: Sequence[Pack], disabled: Iterable[str] = ()) -> list[Rule]:
    """Every rule of ``packs`` except ``disabled`` ids (a pack name disables the whole pack).
    An id that matches nothing is an error (a typo would silently keep the rule on)."""
    rules = [r for p in packs for r in p.rules]
    off = set(disabled)
    known = {r.id for r in rules} | {r.pack for r in rules}
    unknown = sorted(off - known)
    if unknown:
        raise RuleError(f"--disable {unknown[0]}: no such rule or pack; rules: "
                        f"{', '.join(sorted(r.id for r in rules))}")
    return [r for r in rules if r.id not in off and r.pack not in off]


__all__ = ["COLUMNS", "evaluate_rules", "run_rule", "select_rules", "site_text"]
