"""Rule data -> polars expressions. A fixed set of operators, no eval.

``where`` and ``having`` map a column (or measure) to a condition; ``measures`` are
aggregations over a group's rows (optionally filtered), arithmetic on earlier measures, or a
measure relative to the same measure of the other groups. Each maps to one expression.
"""
from __future__ import annotations

import math
import re
from typing import Any

import polars as pl
from zym.analysis.units import fmt_bytes, fmt_ns
from zym.schemas.lookup import distinct_text

_CMP = {
    "eq": lambda c, v: c == v, "ne": lambda c, v: c != v, "lt": lambda c, v: c < v,
    "le": lambda c, v: c <= v, "gt": lambda c, v: c > v, "ge": lambda c, v: c >= v,
    "between": lambda c, v: c.is_between(v[0], v[1]),
    "in": lambda c, v: c.is_in(v), "not_in": lambda c, v: ~c.is_in(v),
    "regex": lambda c, v: c.cast(pl.String).str.contains(v),
    "not_regex": lambda c, v: ~c.cast(pl.String).str.contains(v),
    "is_null": lambda c, v: c.is_null() if v else c.is_not_null(),
}
_AGG = {
    "sum": lambda c: c.sum(), "mean": lambda c: c.mean(), "max": lambda c: c.max(),
    "min": lambda c: c.min(), "median": lambda c: c.median(),
    "p90": lambda c: c.quantile(0.9, "linear"), "p99": lambda c: c.quantile(0.99, "linear"),
    "n_unique": lambda c: c.drop_nulls().n_unique(),
}


def condition(col: pl.Expr, cond: Any, values: pl.Series | None = None) -> pl.Expr:
    """One condition on one column; a bare scalar means equality. Nulls never match, except
    for ``is_null: true`` and ``ne``/``not_in``/``not_regex`` (a null differs from any value).

    ``values``: the column's distinct values, when known; a regular expression then runs on
    them once and becomes membership, instead of running on every event.
    """
    if not isinstance(cond, dict):
        cond = {"eq": cond}
    parts = []
    for op, value in cond.items():
        if op in ("regex", "not_regex") and values is not None:
            hits = values.filter(values.str.contains(value))
            expr = col.is_in(hits.implode()) if op == "regex" else ~col.is_in(hits.implode())
        else:
            expr = _CMP[op](col, value)
        if op in ("ne", "not_in", "not_regex"):
            expr = expr.fill_null(True)
        elif op != "is_null":
            expr = expr.fill_null(False)
        parts.append(expr)
    return pl.all_horizontal(parts)


def where_expr(where: dict, sites: pl.DataFrame | None = None,
               frame: pl.DataFrame | None = None) -> pl.Expr:
    """All conditions of a ``where`` mapping (``any_of``: one of; ``not``: negation).

    With ``sites`` (the site table), a condition on a site column (``op_chain``,
    ``user_function``...) is evaluated once per distinct stack on that small table and becomes
    ``stack_id`` membership on the events: string work scales with stacks, not events.
    """
    from zym.analysis.relations import EVENT_SITE_COLUMNS, SITE_COLUMNS

    parts = []
    for key, cond in where.items():
        if key == "any_of":
            parts.append(pl.any_horizontal([where_expr(w, sites, frame) for w in cond]))
        elif key == "not":
            parts.append(~where_expr(cond, sites, frame))
        elif sites is not None and key in SITE_COLUMNS and key not in EVENT_SITE_COLUMNS:
            ids = sites.filter(condition(pl.col(key), cond))["stack_id"]
            parts.append(pl.col("stack_id").is_in(ids.implode()).fill_null(False))
        else:
            parts.append(condition(pl.col(key), cond, _distinct(frame, key, cond)))
    return pl.all_horizontal(parts) if parts else pl.lit(True)


def relaxed_where(where: dict, available: set[str], sites: pl.DataFrame | None = None,
                  frame: pl.DataFrame | None = None) -> pl.Expr | None:
    """A condition that holds for every row ``where`` keeps, using only ``available`` columns
    (and site columns through ``sites``): conditions on other columns count as true. None
    when nothing constrains the rows. Used to drop rows no rule can keep, early."""
    from zym.analysis.relations import EVENT_SITE_COLUMNS, SITE_COLUMNS

    def usable(key: str) -> bool:
        return key in available or (sites is not None and key in SITE_COLUMNS
                                    and key not in EVENT_SITE_COLUMNS)

    parts = []
    for key, cond in where.items():
        if key == "any_of":
            branches = [relaxed_where(w, available, sites, frame) for w in cond]
            if all(b is not None for b in branches):
                parts.append(pl.any_horizontal(branches))
        elif key == "not":
            if _all_usable(cond, usable):
                parts.append(~where_expr(cond, sites, frame))
        elif usable(key):
            parts.append(where_expr({key: cond}, sites, frame))
    return pl.all_horizontal(parts) if parts else None


def _all_usable(where: dict, usable) -> bool:
    for key, cond in where.items():
        if key == "any_of":
            if not all(_all_usable(w, usable) for w in cond):
                return False
        elif key == "not":
            if not _all_usable(cond, usable):
                return False
        elif not usable(key):
            return False
    return True


def _distinct(frame: pl.DataFrame | None, key: str, cond: Any) -> pl.Series | None:
    """Distinct text values of ``frame[key]``, for a regex condition on a text column."""
    if (frame is None or key not in frame.columns or not isinstance(cond, dict)
            or not ({"regex", "not_regex"} & set(cond))):
        return None
    column = frame[key]
    if column.dtype not in (pl.String, pl.Categorical):
        return None
    return distinct_text(column)


def aggregation(name: str, spec: dict, sites: pl.DataFrame | None = None,
                frame: pl.DataFrame | None = None) -> pl.Expr:
    """An aggregation measure over a group's rows."""
    mask = where_expr(spec["where"], sites, frame) if spec.get("where") else None
    if spec["agg"] == "count":
        expr = mask.sum() if mask is not None else pl.len()
        return expr.cast(pl.Int64).alias(name)
    col = pl.col(spec["of"])
    if spec["agg"] == "top":  # the value of the row with the largest ``by`` (nulls skipped)
        by = pl.col(spec["by"])
        col, by = (col.filter(mask), by.filter(mask)) if mask is not None else (col, by)
        return col.sort_by(by, descending=True, nulls_last=True).drop_nulls().first().alias(name)
    if mask is not None:
        col = col.filter(mask)
    return _AGG[spec["agg"]](col).alias(name)


def derived(name: str, spec: dict, constants: dict[str, int]) -> pl.Expr:
    """A measure computed from other measures of the same group (or across groups)."""
    def operand(x: str | float) -> pl.Expr:
        if isinstance(x, str):
            return pl.lit(constants[x]) if x in constants else pl.col(x)
        return pl.lit(x)

    if "div" in spec:
        a, b = (operand(x).cast(pl.Float64) for x in spec["div"])
        return pl.when(b != 0).then(a / b).alias(name)
    if "sub" in spec:
        a, b = (operand(x) for x in spec["sub"])
        return (a - b).alias(name)
    if "mul" in spec:
        a, b = (operand(x) for x in spec["mul"])
        return (a * b).alias(name)
    if "add" in spec:
        a, b = (operand(x) for x in spec["add"])
        return (a + b).alias(name)
    base = pl.col(spec["rel"]).cast(pl.Float64)
    ref = {"min": base.min(), "median": base.median(), "max": base.max()}[spec.get("to", "min")]
    return pl.when(ref != 0).then(base / ref).alias(name)


def having_expr(having: dict) -> pl.Expr:
    return pl.all_horizontal([condition(pl.col(k), v) for k, v in having.items()]) \
        if having else pl.lit(True)


# ---------------------------------------------------------------------------------------------
# Message templates: substitution of names, never evaluation

def render(template: str, values: dict[str, Any]) -> str:
    """Fill ``{name}`` / ``{name:fmt}`` placeholders (fmt: ns, bytes, pct, x, int, float, str);
    ``{a|b}`` takes the first name that has a value, and a ``{? ... ?}`` part is left out
    when one of its placeholders has none. One pass: substituted text is never rescanned."""
    from .model import PARTS, TEMPLATE

    def value(names: str) -> Any:
        return next((values[n] for n in names.split("|") if values.get(n) is not None), None)

    def part(m: re.Match) -> str:
        optional, names, kind = m.groups()
        if optional is None:
            return fmt(value(names), kind)
        inside = list(TEMPLATE.finditer(optional))
        if any(value(p.group(1)) is None for p in inside):
            return ""
        return TEMPLATE.sub(lambda p: fmt(value(p.group(1)), p.group(2)), optional)

    return PARTS.sub(part, template)


def fmt(value: Any, kind: str | None) -> str:
    if value is None:
        return "?"
    if kind == "ns":
        return fmt_ns(value)
    if kind == "bytes":
        return fmt_bytes(value)
    if kind == "pct":
        return f"{100 * value:.1f}%"
    if kind == "x":
        return f"{value:.1f}×"
    if kind == "int":
        return f"{round(value):,}"
    if kind == "float" or isinstance(value, float):
        # from 1,000 on a whole number with separators ("3,936 kernels", not "3.94e+03")
        if math.isfinite(value) and abs(value) >= 1000:
            return f"{round(value):,}"
        return f"{value:.3g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)
