"""Run rule packs over an analysis: each rule is one lazy polars query over one relation.

filter (``where``) -> group (``group_by``) -> aggregate (standard + rule measures) -> derive
-> threshold (``having``) -> findings -> what fixing each saves (its ``saving`` model replayed
on the timeline: :mod:`zym.rules.savings`) -> ranked by that saving. Occurrences are the
filtered rows of the firing groups (a semi-join), never a Python loop over events.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

import polars as pl
from zym.analysis.relations import (
    COLUMNS,
    DEFERRED,
    OCCURRENCE,
    ROW_KEY,
    STANDARD_MEASURES,
    Relations,
    deferred_columns,
)
from zym.analysis.sites import own_code_caller

from .compile import aggregation, derived, having_expr, render, where_expr
from .findings import OCCURRENCE_COLUMNS, Finding, Findings, Tally
from .model import EVENT_LABELS, SEVERITY_RANK, Pack, Rule, RuleError

if TYPE_CHECKING:
    from zym.analysis import Analysis

DEFAULT_COST = {"calls": "stall_ns", "gpu": "gpu_ns", "attention": "gpu_ns", "gaps": "idle_ns",
                "paths": "gpu_ns", "steps": "span_ns", "items": "item_span_ns", "stretches": "work_ns",
                "windows": "span_ns"}
# Labels read from the site table, for the group's site (or its first event's stack).
_SITE_LABELS = ("user_node", "user_function", "user_file", "user_line", "user_module",
                "user_source", "mechanism", "torch_op", "size_op", "py_api", "site")
# Event columns each saving model reads (besides the relation's row key).
_MODEL_COLUMNS = {"speedup": ("dur_ns", "precision", "op_class", "flops"),
                  "cpu-work": ("quiet_idx", "quiet_py_ns", "end_ns"),
                  "cuda-graph": ("step", "size_syncs"), "batch": ("call_instance",),
                  "autograd-off": ("step",), "eval-mode": ("step",),
                  "items": ("step", "item_function"),
                  "fused-attention": ("role", "attention", "dur_ns", "fused_ns")}


def evaluate_rules(analysis: Analysis, rules: Sequence[Rule],
                   relations: Relations | None = None, together: bool = True,
                   progress: Callable[[str], None] | None = None) -> Findings:
    """Findings of ``rules`` on ``analysis``, ranked by what fixing each would save (see
    :func:`rank`; ``together``: also replay the fixes together; ``progress``: told the stage
    and the replays done, see :class:`~zym.rules.findings.Tally`).

    The rules of one relation are collected together (``polars.collect_all``): the relation
    they share is built once, with only the columns some rule reads, and dropped once they
    have run (the rules that fired keep what they read).
    """
    rel = relations or analysis.relations
    rules = [r for r in rules if _fits_gpus(r.gpus, analysis)]
    if progress is not None:
        progress(f"applying {len(rules)} rules")
    # The replay's timeline and unfixed state are built on a thread while the rules run
    # (their relations are polars queries): ready when the first fix is (~1 s at 1 M GPU ops).
    ahead = ThreadPoolExecutor(1, thread_name_prefix="zym-replay")
    ready = ahead.submit(_replay_ready, analysis) if rules else None
    try:
        findings = _evaluate(analysis, rules, rel)
        if ready is not None:   # done, not raised here: a timeline that cannot be built
            wait([ready])       # fails where it is needed (with no finding, nowhere)
    finally:
        ahead.shutdown(wait=True, cancel_futures=True)
    return rank(analysis, findings, together, progress)


def _replay_ready(analysis: Analysis) -> None:
    """The state every replay starts from (the timeline, the unfixed replay's state)."""
    tl = analysis.timeline
    if tl.usable:
        tl.baseline  # noqa: B018 - builds the unfixed replay's state


def _evaluate(analysis: Analysis, rules: list[Rule], rel: Relations) -> list[Finding]:
    """The rules' findings, unranked (see ``evaluate_rules``)."""
    needed: dict[str, set[str]] = {}
    wheres: dict[str, list[dict]] = {}
    for rule in rules:
        needed.setdefault(rule.relation, set()).update(rule_columns(rule))
        wheres.setdefault(rule.relation, []).append(rule.where)
        rel.reading_sites(site_columns_read(rule))
    # One relation at a time, each dropped once its rules' queries have run: from then on a
    # frame is held only by the plans of rules that fired (each until its findings' fixes are
    # estimated), so a relation no finding reads (at 10 M GPU operations, the GPU relation's
    # 5 M rows) is neither beside the next one's build nor kept through the replays.
    of_rule: list[list[Finding]] = [[] for _ in rules]
    for name, cols in needed.items():
        at = [i for i, rule in enumerate(rules) if rule.relation == name]
        frame = rel.materialize(name, cols, wheres[name])
        plans = [_plan(rules[i], rel, frame) for i in at]
        fired = pl.collect_all([p["grouped"] for p in plans])
        for i, plan, got in zip(at, plans, fired):
            if got.height:
                of_rule[i] = _findings(plan, got, rel,
                                       functools.partial(_replan, rules[i], rel,
                                                         frozenset(frame.columns), wheres[name]))
        del frame, plans, fired
        rel.forget(name, wheres[name])
    findings = [f for found in of_rule for f in found]
    return _apply_supersedes(findings, rules)


def rank(analysis: Analysis, findings: list[Finding], together: bool = True,
         progress: Callable[[str], None] | None = None) -> Findings:
    """Estimate each finding's saving, merge findings whose fixes are the same edit, rank by
    saving (findings without an estimate last, by observed cost), and replay all fixes
    together for the window's total, and each in rank order for what it adds to those above
    it (``saving_incremental_ns``: these sum to the total, so no time is counted twice).
    ``together=False`` leaves that last replay out (``total_ns`` and each
    ``saving_incremental_ns`` stay None): `zym diff` compares each finding's own saving."""
    from zym.analysis.replay import replay_threads

    from .savings import fix_for

    # The fixes are replayed by worker threads while the next findings' fixes are built
    # (polars queries, which release the GIL; the compiled replay loops do too). A replay's
    # outcome does not depend on which replay ran before it on its thread (each thread starts
    # from the unfixed replay or its own last one: the same outcome, tests compare them).
    saving = analysis.timeline.saving if findings else None  # built ahead (evaluate_rules)
    pool = ThreadPoolExecutor(max_workers=replay_threads(), thread_name_prefix="zym-replay")
    tally = Tally(progress, "estimating each finding's fix",
                  len(findings) + sum("instead" in f.saving_model for f in findings))

    def replay(fix):   # each finding's own fix: no later replay on its thread starts from it
        done = pool.submit(saving, fix, alone=True)
        done.add_done_callback(tally.tick)
        return done.result

    try:
        for i, f in enumerate(findings):
            f.estimate(analysis, fix_for, replay)
            if not callable(f.saving_ns):  # no replay (no estimate): done now
                tally.tick()
            if "instead" in f.saving_model and not (
                    f.saving_instead is not None and callable(f.saving_instead["saving_ns"])):
                tally.tick()  # (its second fix: none replayed)
            after = findings[i + 1].release_events if i + 1 < len(findings) else None
            if f.release_events is not None and f.release_events != after:  # its rule's last
                f.release_events()
        for f in findings:
            f.resolve()
        _sampled_how(analysis, findings)
    except BaseException:  # Ctrl-C or an error: the replays not yet started are dropped
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    findings = _merge_same_fix(findings)
    floor = noise_floor_ns(analysis.facts.window_ns)
    findings.sort(key=lambda f: (_tier(f.saving_ns, floor), -(f.saving_ns or 0), -f.cost_ns,
                                 -SEVERITY_RANK[f.severity], f.rule_id, f.site))
    return Findings(findings, analysis if together else None, progress)


def _sampled_how(analysis: Analysis, findings: list[Finding]) -> None:
    """Where the fixes were replayed on a sample of the window (``zym.analysis.sample``):
    each estimate says so, with what each half of the sample gives alone."""
    if not any(f.edit is not None for f in findings):  # no replay: no timeline to ask
        return
    sampled = getattr(analysis.timeline, "sampled", None)
    if not sampled:
        return
    from zym.analysis.sample import share_text
    from zym.analysis.units import fmt_ns

    how = ("each half of the capture's sample, its alternate slices, replayed apart gives"
           if sampled.get("of_capture_sample") else
           f"replayed on {share_text(sampled)} in {sampled['runs']} runs and scaled to the "
           "window: its two halves give")
    for f in findings:
        halves = analysis.timeline.spread(f.edit) if f.edit is not None else None
        if halves is not None:
            f.saving_halves_ns = halves
            f.saving_how += f" ({how} ~{fmt_ns(halves[0])} and ~{fmt_ns(halves[1])})"


def _fits_gpus(want: dict, analysis: Analysis) -> bool:
    """A rule's ``gpus`` against the capture's recorded GPUs: it applies when one of them
    has every math in ``has`` (a GPU whose maths are not known counts as having them) and is
    known to lack every math in ``lacks``; with no GPU recorded, a rule that names ``lacks``
    does not apply."""
    if not want:
        return True
    from zym.analysis.throughput import gpu_maths

    has, lacks = set(want.get("has", ())), set(want.get("lacks", ()))
    gpus = analysis.data.meta.gpus or [{}]
    for gpu in gpus:
        maths = gpu_maths(gpu)
        if (maths is None or has <= maths) and (not lacks or (maths is not None
                                                             and not lacks & maths)):
            return True
    return False


def noise_floor_ns(window_ns: int) -> int:
    """A saving below this is no gain to rank first: 0.1% of the window, at least 1 us."""
    return max(1_000, window_ns // 1_000)


def _tier(saving_ns: int | None, floor: int) -> int:
    """Findings whose fix saves something come first, then those without an estimate
    (context), then those whose fix, replayed, saves less than the noise floor."""
    if saving_ns is None:
        return 1
    return 0 if saving_ns >= floor else 2


def _merge_same_fix(findings: list[Finding]) -> list[Finding]:
    """Findings whose fix is the same timeline edit keep one entry (the one that saves more,
    then the more severe); the others are named in its ``also``."""
    out: dict[tuple, Finding] = {}
    rest = []
    for f in findings:
        key = f.fix_key()
        if key is None:
            rest.append(f)
            continue
        have = out.get(key)
        if have is None:
            out[key] = f
            continue
        keep, drop = (have, f) if (have.saving_ns or 0, SEVERITY_RANK[have.severity]) >= (
            f.saving_ns or 0, SEVERITY_RANK[f.severity]) else (f, have)
        keep.also.append(f"{drop.rule_id}: {drop.title}")
        out[key] = keep
    return list(out.values()) + rest


def rule_columns(rule: Rule) -> set[str]:
    """Event columns a rule reads: filters, groups, measures, labels in its templates, and
    what every rule needs (standard measures, occurrences, site keys)."""
    from zym.analysis.relations import EVENT_SITE_COLUMNS, SITE_COLUMNS

    cols = _names(rule)
    site_only = set(SITE_COLUMNS) - set(EVENT_SITE_COLUMNS) - set(rule.group_by)
    cols = (cols - site_only) & set(COLUMNS[rule.relation])
    if cols & set(DEFERRED):  # gathered per rule after its other filters (see _plan)
        cols = (cols - set(DEFERRED)) | {"call_idx"}
    return cols


def site_columns_read(rule: Rule) -> set[str]:
    """The site table's columns a rule names (filters, groups, measures, templates)."""
    from zym.analysis.relations import SITE_COLUMNS

    return _names(rule) & set(SITE_COLUMNS)


def _names(rule: Rule) -> set[str]:
    """Every column a rule names, and what every rule of its relation reads."""
    from zym.analysis.relations import EVENT_SITE_COLUMNS

    from .model import template_names

    cols = set(rule.group_by) | {"stack_id", *EVENT_SITE_COLUMNS, ROW_KEY[rule.relation],
                                 *_saving_columns(rule)}
    if rule.relation in ("calls", "gaps", "gpu"):
        cols.add("call_idx")
    skip = {"instances"} - _referenced(rule)
    standard = [e for n, e in STANDARD_MEASURES[rule.relation].items() if n not in skip]
    for expr in [*standard, *OCCURRENCE[rule.relation]]:
        cols.update(expr.meta.root_names())

    cols |= _where_columns(rule.where)
    for spec in rule.measures.values():
        cols |= _where_columns(spec.get("where", {}))
        if "of" in spec:
            cols.add(spec["of"])
    for text in (rule.title, rule.message, rule.fix):
        cols.update(template_names(text))
    cols.update(c for c in ("api", "name") if c in COLUMNS[rule.relation])  # "what" fallback
    if rule.relation in ("steps", "items", "stretches"):
        cols.add("function")
    return cols


def rule_columns_deferred(rule: Rule) -> set[str]:
    """The per-call text columns (``DEFERRED``) a rule reads anywhere."""
    from .model import template_names

    names: set[str] = set(rule.group_by)
    for spec in rule.measures.values():
        names.add(spec.get("of", ""))
        if _uses(spec.get("where", {}), set(DEFERRED)):
            names.update(DEFERRED)
    if _uses(rule.where, set(DEFERRED)):
        names.update(k for k in DEFERRED if _uses(rule.where, {k}))
    for text in (rule.title, rule.message, rule.fix):
        names.update(template_names(text))
    return names & set(DEFERRED)


def _referenced(rule: Rule) -> set[str]:
    """Measure names a rule reads: in derived measures, thresholds, cost and templates."""
    from .model import template_names

    names = set(rule.having) | {rule.cost or ""}
    for spec in rule.measures.values():
        names.update(x for x in spec.get("div", []) + spec.get("mul", []) + spec.get("sub", [])
                     + spec.get("add", [])
                     if isinstance(x, str))
        names.add(spec.get("rel", ""))
    for text in (rule.title, rule.message, rule.fix):
        names.update(template_names(text))
    return names


def _uses(where: dict, names: set[str]) -> bool:
    """Whether a where mapping reads any of ``names``."""
    for key, cond in where.items():
        if key == "any_of" and any(_uses(w, names) for w in cond):
            return True
        if key == "not" and _uses(cond, names):
            return True
        if key in names:
            return True
    return False


def run_rule(rule: Rule, rel: Relations) -> list[Finding]:
    """Findings of one rule (no supersedes, unranked): for tests and debugging."""
    plan = _plan(rule, rel, rel.materialize(rule.relation, rule_columns(rule), [rule.where]))
    frame = plan["grouped"].collect()
    if frame.height == 0:
        return []
    return _findings(plan, frame, rel)


def _replan(rule: Rule, rel: Relations, columns: frozenset[str], wheres: list[dict]) -> dict:
    """A rule's plan built again, on its relation built again (the same rows and columns)."""
    return _plan(rule, rel, rel.materialize(rule.relation, set(columns), wheres))


def _plan(rule: Rule, rel: Relations, frame: pl.DataFrame) -> dict:
    """The lazy query of one rule: filter, group, measure, derive, threshold."""
    from zym.analysis.relations import EVENT_SITE_COLUMNS, SITE_COLUMNS

    lf, columns = frame.lazy(), frame.columns
    sites = rel.sites if "stack_id" in columns else None
    keys = list(rule.group_by)
    joined = [k for k in keys if k in SITE_COLUMNS and k not in EVENT_SITE_COLUMNS]
    if joined:  # grouping by a site column: the one case that joins site strings to events
        # In the events' order: a group's labels (its first site id) must not depend on it.
        lf = lf.join(rel.sites.lazy().select("stack_id", *joined), on="stack_id", how="left",
                     maintain_order="left")
    # Conditions on per-call text (dtype, shapes) run after the others, on the rows they keep.
    late = {k: v for k, v in rule.where.items() if _uses({k: v}, set(DEFERRED))}
    early = {k: v for k, v in rule.where.items() if k not in late}
    rows = lf.filter(where_expr(early, sites, frame)) if early else lf
    deferred = (rule_columns_deferred(rule) - set(columns)) if "call_idx" in columns else set()
    if deferred:
        rows = rows.with_columns(deferred_columns(rel, deferred))
        columns = [*columns, *deferred]
    if late:
        rows = rows.filter(where_expr(late, sites))
    constants = {"total_gpu_ns": rel.total_gpu_ns, "window_ns": rel.window_ns}
    # n_unique is the one costly standard measure: computed for rules that read it.
    costly = {"instances"} - _referenced(rule)
    aggs = [e.alias(n) for n, e in STANDARD_MEASURES[rule.relation].items() if n not in costly]
    aggs += [aggregation(n, s, sites, frame) for n, s in rule.measures.items() if "agg" in s]
    labels = [_label(c) for c in EVENT_LABELS if c in columns and c not in keys and c != "api"]
    if "stack_id" in columns:
        labels.append(pl.col("stack_id").drop_nulls().first().alias("_l_stack_id"))
        if "site_id" not in keys:
            labels.append(pl.col("site_id").drop_nulls().first().alias("_l_site_id"))
    source = rows
    if "api" in columns and "api" not in keys:
        source, label = _api_label(rows, keys)
        labels.append(label)
    grouped = (source.group_by(keys, maintain_order=True).agg(*aggs, *labels) if keys
               else source.select(*aggs, *labels))
    for name, spec in rule.measures.items():
        if "agg" not in spec:
            grouped = grouped.with_columns(derived(name, spec, constants))
    grouped = grouped.filter((pl.col("count") > 0) & having_expr(rule.having))
    return {"rule": rule, "rows": rows, "grouped": grouped, "keys": keys,
            "constants": constants, "cost": rule.cost or DEFAULT_COST[rule.relation]}


class _Occurrences:
    """The offending events of one rule's findings, computed for all of them on first use."""

    def __init__(self, plan: dict, fired: pl.DataFrame,
                 replan: Callable[[], dict] | None = None) -> None:
        self.plan: dict | None = plan
        self.fired, self.relation = fired, plan["rule"].relation
        self.replan = replan  # the plan built again (from the relation built again)
        self.parts: dict[tuple, pl.DataFrame] | None = None
        self.occ: dict[tuple, pl.DataFrame] | None = None  # ``of`` each group, once released
        self.examples_of: tuple[int, dict[tuple, list[dict]]] | None = None  # (n, per group)

    def release(self) -> None:
        """Keep of each group's rows only its occurrences (what reports read), once the fix
        models have read the rest: every column of every offending event is not held through
        the other findings' replays (``rows`` builds them again if asked), nor the relation's
        frame the plan reads (with a ``replan``: it is built again if asked)."""
        if self.parts is not None:
            self.occ = {key: self._occurrences(part) for key, part in self.parts.items()}
            self.parts = None
        if self.replan is not None and self.occ is not None:
            self.plan = None

    def rows(self, key: tuple) -> pl.DataFrame:
        """The group's filtered rows, with the columns the fix models and the occurrences
        read (:func:`event_columns`), not every column the rules read."""
        if self.parts is None:   # every group's rows at once (one query, not one each)
            rows = self._event_rows()
            keys = self.plan["keys"]
            if not keys:
                self.parts = {(): rows.collect()}
            else:
                occ = (rows.join(self.fired.lazy().select(keys), on=keys,
                                 how="semi", nulls_equal=True).collect())
                self.parts = dict(occ.partition_by(keys, as_dict=True, maintain_order=True))
        part = self.parts.get(key)
        return part if part is not None else self._event_rows().clear().collect()

    def _event_rows(self) -> pl.LazyFrame:
        """The plan's rows with :func:`event_columns` (the plan made again if released)."""
        if self.plan is None:
            self.plan = self.replan()
        rows = self.plan["rows"]
        return rows.select(event_columns(self.plan["rule"], self.plan["keys"],
                                         rows.collect_schema().names()))

    def of(self, key: tuple) -> pl.DataFrame:
        """The group's occurrences: ``pid, tid, ts_ns, dur_ns, correlation_id``."""
        if self.occ is not None:
            return self.occ.get(key, _EMPTY_OCC)
        return self._occurrences(self.rows(key))

    def _occurrences(self, rows: pl.DataFrame) -> pl.DataFrame:
        if rows.height == 0:
            return _EMPTY_OCC
        return rows.select(OCCURRENCE[self.relation])

    def examples(self, key: tuple, n: int) -> list[dict]:
        """The group's ``n`` costliest occurrences (``findings.top_examples``); for a rule
        with many findings of few occurrences each, every group's at once
        (``top_examples_by_group``: one query, not one each), kept. Findings of many
        occurrences keep a query each: a lazy sort that keeps ``n`` rows, no copy of them."""
        from .findings import top_examples, top_examples_by_group

        if self.examples_of is None and self.fired.height >= EXAMPLES_TOGETHER:
            groups = (list(self.occ) if self.occ is not None else  # (else the plan is kept)
                      [tuple(r) for r in self.fired.select(self.plan["keys"]).iter_rows()])
            of = {g: self.of(g) for g in groups}
            if sum(f.height for f in of.values()) <= EXAMPLES_ROWS * len(of):
                frames = [f.with_columns(pl.lit(i, pl.Int64).alias("group"))
                          for i, f in enumerate(of.values())]
                by_group = top_examples_by_group(pl.concat(frames, how="vertical_relaxed"), n)
                self.examples_of = (n, {g: by_group.get(i, []) for i, g in enumerate(of)})
            else:
                self.examples_of = (-1, {})  # per finding
        if self.examples_of is not None and self.examples_of[0] == n:
            return self.examples_of[1].get(key, [])
        return top_examples(self.of(key), n)


def event_columns(rule: Rule, keys: list[str], columns: list[str]) -> list[str]:
    """Of a rule's filtered rows' ``columns``, those its findings' events keep: the group
    keys, the row key and ``call_idx``, what its fix model reads (``fix_for``: ``call_idx``
    for the call models, ``_MODEL_COLUMNS`` for the others) and the occurrences' columns.
    (At 10 M GPU operations, the pinned-memory rule's 2.5 M events with every column the
    calls rules read were 0.5 GB, held beside the first replays.)"""
    want = {*keys, ROW_KEY[rule.relation], "call_idx", *_saving_columns(rule)}
    for expr in OCCURRENCE[rule.relation]:
        want.update(expr.meta.root_names())
    return [c for c in columns if c in want]


def _saving_columns(rule: Rule) -> set[str]:
    """What a rule's fix models read of its events: each model's columns
    (``_MODEL_COLUMNS``) and what its ``only`` names (a site column: through ``stack_id``),
    for the first fix and its ``instead``."""
    cols: set[str] = set()
    for model in (rule.saving, rule.saving.get("instead", {})):
        only = _where_columns(model.get("only", {}))
        cols |= {*_MODEL_COLUMNS.get(model.get("model", "none"), ()), *only,
                 *(("stack_id",) if only else ())}
    return cols


def _where_columns(where: dict) -> set[str]:
    """The columns a ``where`` mapping names."""
    cols: set[str] = set()
    for key, cond in where.items():
        if key == "any_of":
            for w in cond:
                cols |= _where_columns(w)
        elif key == "not":
            cols |= _where_columns(cond)
        else:
            cols.add(key)
    return cols


def _findings(plan: dict, fired: pl.DataFrame, rel: Relations,
              replan: Callable[[], dict] | None = None) -> list[Finding]:
    keys, rule = plan["keys"], plan["rule"]
    store = _Occurrences(plan, fired, replan)
    site_of = ("site_id" if "site_id" in keys else "_l_site_id")
    if site_of in fired.columns:  # labels of the group's site, from the site table
        info = rel.sites.select(pl.col("stack_id").alias(site_of), *[
            pl.col(c).alias(f"_l_{c}") for c in _SITE_LABELS if c not in keys])
        fired = fired.join(info, on=site_of, how="left", maintain_order="left")
    graph = rel.analysis.call_paths.graph
    extra = {"instance": rel.instance_label()}
    out = []
    for row in fired.iter_rows(named=True):  # one row per finding: few, not per event
        key = tuple(row[k] for k in keys)
        f = _finding(rule, row, lambda key=key: store.of(key), plan["cost"],
                     plan["constants"] | extra, graph)
        f.event_source = lambda key=key: store.rows(key)
        f.example_source = lambda n, key=key: store.examples(key, n)
        f.release_events = store.release
        out.append(f)
    return out


_EMPTY_OCC = pl.DataFrame(schema={c: pl.Int64 for c in OCCURRENCE_COLUMNS})
# A rule with at least this many findings, of at most EXAMPLES_ROWS occurrences each on
# average, has their examples picked together, in one query.
EXAMPLES_TOGETHER = 32
EXAMPLES_ROWS = 4096


def _label(column: str) -> pl.Expr:
    """A group's label from an event column: its first value (the CUDA API's:
    :func:`_api_label`)."""
    return pl.col(column).drop_nulls().first().alias(f"_l_{column}")


def _api_label(rows: pl.LazyFrame, keys: list[str]) -> tuple[pl.LazyFrame, pl.Expr]:
    """``rows`` marked where each (group, CUDA API) pair is first used, and the group label
    made of them: every API of the group in order of first use, up to three (a group of
    cudaMalloc and cudaFree calls is not titled by one of them), null where the group has
    none. One hashing pass over the rows, not a set built in each group (at 2.5 M copies
    that, with every row's name cast to text, took 0.3 s a rule)."""
    pair = pl.struct(*keys, "api") if keys else pl.col("api")
    first = (pair.is_first_distinct() & pl.col("api").is_not_null()).alias("_api_first")
    names = pl.col("api").filter(pl.col("_api_first")).cast(pl.String)
    more = pl.when(names.len() > 3).then(pl.lit(" and others")).otherwise(pl.lit(""))
    label = pl.when(names.len() > 0).then(pl.concat_str([names.head(3).str.join(" / "), more]))
    return rows.with_columns(first), label.alias("_l_api")


def _finding(rule: Rule, row: dict, occ: Any, cost: str, constants: dict,
             graph: Any) -> Finding:
    labels = {k[3:]: v for k, v in row.items() if k.startswith("_l_")}
    for k in rule.group_by:
        labels[k] = row[k]
    site_id = labels.get("site_id")
    site = site_text(labels)
    if "function" in labels and labels.get("user_function") is None and rule.relation in (
            "steps", "items", "stretches"):
        site = f"each step: {labels['function']}"
        if labels.get("quiet_where"):  # (the place a step's CPU work went, from the spans)
            site = f"{labels['quiet_where']} ({site})"
    measures = {k: v for k, v in row.items() if not k.startswith("_l_") and k not in rule.group_by}
    evidence = {k: _plain(v) for k, v in measures.items()}
    if rule.relation == "calls" and "instances" in evidence:
        evidence["instance"] = constants["instance"]
    if "gpu_ns" in evidence and constants["total_gpu_ns"]:
        evidence["gpu_share"] = round(evidence["gpu_ns"] / constants["total_gpu_ns"], 4)
    if "idle_ns" in evidence and constants["window_ns"]:
        evidence["idle_share_of_window"] = round(evidence["idle_ns"] / constants["window_ns"], 4)
    for k in rule.group_by:
        evidence.setdefault(k, _plain(row[k]))
    values = measures | labels | constants | {
        "site": site, "what": _what(labels, rule.what), "instance": _instance(labels, constants),
        # a count per call means something only where the calls are of a user function
        "user_instance": _instance(labels, constants) if labels.get("user_function") else None}
    chain, caller = [], None
    if site_id is not None and graph is not None:
        frames = graph.user_frames(site_id)
        chain = [f"{f['file']}:{f['line']} {f['name']}" for f in frames]
        caller = own_code_caller(frames)
    return Finding(
        rule_id=rule.id, severity=rule.severity, title=render(rule.title, values),
        message=render(rule.message, values), site=site, user_chain=chain, evidence=evidence,
        fix=render(rule.fix, values), cost_ns=int(measures.get(cost) or 0), pack=rule.pack,
        site_id=site_id, occurrence_count=int(row["count"]), occurrence_source=occ,
        group_key=tuple((k, row[k]) for k in rule.group_by), saving_model=dict(rule.saving),
        relation=rule.relation, measures={k: v for k, v in measures.items()
                                          if isinstance(v, (int, float))},
        source=labels.get("user_source"), called_from=caller)


def site_text(labels: dict) -> str:
    """The site of a group as users read it (:func:`zym.analysis.sites.site_label`)."""
    from zym.analysis.sites import NO_USER_FRAME, site_label

    if labels.get("site") is not None and labels.get("user_function") is not None:
        return labels["site"]
    if labels.get("user_function") is None:
        if "stack_id" not in labels:  # a relation without stacks (windows, steps)
            return "(whole window)"
        if labels.get("stack_id") is None:
            return "(call not captured)"
        return NO_USER_FRAME

    return site_label(labels["user_function"], labels.get("user_file"), labels.get("user_line"),
                      labels.get("user_module"))


def _what(labels: dict, default: str = "") -> str:
    """What the code does, in the user's terms: the Python call on the line (``.item()``,
    ``.cpu()``: from its source text or built-ins), else what the rule says the calls are, else
    the torch op, the CUDA API or the kernel."""
    return (labels.get("mechanism") or default or labels.get("torch_op") or labels.get("api")
            or labels.get("name") or "CUDA calls")


def _instance(labels: dict, constants: dict) -> str:
    """What ``per_call`` counts per: a call of the site's function."""
    return f"call of {labels.get('user_function') or 'the enclosing function'}"


def _plain(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 6)
    return v


def _apply_supersedes(findings: list[Finding], rules: Iterable[Rule]) -> list[Finding]:
    """Drop a finding when a more specific rule fired on the same code: the same group when
    both rules group alike, else the same site as users read it (e.g. one rule groups by user
    line, the other by line + torch op); the finding that stays names it in ``also``."""
    by_id = {r.id: r for r in rules}

    def where(f: Finding, other: str) -> tuple | str:
        return f.group_key if by_id[f.rule_id].group_by == by_id[other].group_by else f.site

    winner = {(w.rule_id, old, where(w, old)): w for w in findings
              for old in by_id[w.rule_id].supersedes if old in by_id}
    superseders = {old: [r.id for r in by_id.values() if old in r.supersedes] for old in by_id}
    kept = []
    for f in findings:
        w = next((winner[k] for r in superseders[f.rule_id]
                  if (k := (r, f.rule_id, where(f, r))) in winner), None)
        if w is None:
            kept.append(f)
        else:
            w.also.append(f"{f.rule_id}: {f.title}")
    return kept


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


__all__ = ["COLUMNS", "evaluate_rules", "rank", "run_rule", "select_rules", "site_text"]
