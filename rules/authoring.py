"""Rule-pack authoring: fixture tests kept beside a pack, and the template of a new pack.

Fixtures of ``mypack.yaml`` live in ``mypack.tests/`` beside it. Each case is one
``CASE.expect.yaml``::

    capture: small.parquet          # relative to this file: .parquet, .json or .json.gz
    expect:                         # findings that must be there
      - rule: mypack.slow-thing
        site: "app.py:20 step"      # optional: a substring of the finding's site
        evidence: {count: 6}        # optional: exact values
    absent: [mypack.other-thing]    # rules that must not fire on this capture
    exclusive: false                # true: no other rule of the pack may fire

``run_pack_tests`` runs the pack (alone, without the built-in packs) on each case's capture.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .model import RuleError, load_pack


@dataclass
class CaseResult:
    case: str
    passed: bool
    problems: list[str] = field(default_factory=list)
    fired: list[str] = field(default_factory=list)


def fixtures_dir(pack_path: Path) -> Path:
    return pack_path.with_suffix("").with_name(pack_path.stem + ".tests")


def run_pack_tests(pack_path: str | Path, fixtures: str | Path | None = None) -> list[CaseResult]:
    """Run one pack against every ``*.expect.yaml`` case in its fixtures folder."""
    import yaml
    from zym.analysis import analyze

    from .engine import evaluate_rules

    pack_path = Path(pack_path)
    pack = load_pack(pack_path)
    folder = Path(fixtures) if fixtures else fixtures_dir(pack_path)
    cases = sorted(folder.glob("*.expect.yaml")) if folder.is_dir() else []
    if not cases:
        raise RuleError(f"{pack_path}: no fixture cases (*.expect.yaml) in {folder}; see "
                        "docs/rules.md, 'Testing a pack'")
    ids = {r.id for r in pack.rules}
    results = []
    for case in cases:
        try:
            spec = yaml.safe_load(case.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as e:
            raise RuleError(f"{case}: not valid YAML ({' '.join(str(e).split())})") from e
        if not isinstance(spec, dict) or "capture" not in spec:
            raise RuleError(f"{case}: field capture: missing (the capture file to run on)")
        for i, exp in enumerate(spec.get("expect", [])):
            if not isinstance(exp, dict) or exp.get("rule") not in ids:
                raise RuleError(f"{case}: field expect[{i}].rule: not a rule of pack "
                                f"{pack.name} ({', '.join(sorted(ids))})")
        findings = evaluate_rules(analyze(case.parent / spec["capture"]), list(pack.rules))
        results.append(_check(case, spec, findings))
    return results


def _check(case: Path, spec: dict, findings: list) -> CaseResult:
    problems = []
    matched: set[int] = set()
    for exp in spec.get("expect", []):
        hits = [i for i, f in enumerate(findings) if f.rule_id == exp["rule"]
                and exp.get("site", "") in f.site]
        good = [i for i in hits if all(findings[i].evidence.get(k) == v
                                       for k, v in (exp.get("evidence") or {}).items())]
        if not hits:
            problems.append(f"expected {exp['rule']}" + (f" at {exp['site']!r}" if exp.get("site")
                                                           else "") + ": did not fire")
        elif not good:
            got = {k: findings[hits[0]].evidence.get(k) for k in exp["evidence"]}
            problems.append(f"{exp['rule']}: evidence {got} != expected {exp['evidence']}")
        matched.update(good)
    for rid in spec.get("absent", []):
        if any(f.rule_id == rid for f in findings):
            problems.append(f"{rid} fired but is listed as absent")
    if spec.get("exclusive"):
        for i, f in enumerate(findings):
            if i not in matched:
                problems.append(f"unexpected finding {f.rule_id} at {f.site}")
    return CaseResult(case.name.removesuffix(".expect.yaml"), not problems, problems,
                      [f"{f.rule_id} @ {f.site}" for f in findings])


def new_pack_text(name: str) -> str:
    """A commented pack template named ``name``, valid as written (``zym rules lint``)."""
    return TEMPLATE.replace("NAME", name)


TEMPLATE = """\
# A zym rule pack. Rules are data: they filter, group and measure one relation of a capture
# and fire when a threshold holds. Format: docs/rules.md; schema: schemas/rule.schema.json.
# Check it:  zym rules lint NAME.yaml       Use it:  zym analyze TRACE --rules NAME.yaml
pack: NAME
version: 1
doc: What this pack looks for.
rules:
  - id: NAME.many-small-launches        # stable, dotted, starts with the pack name
    title: "Many small kernels from {what}"
    severity: info                      # info | warning | error
    doc: >
      What it detects and why it costs. Shown by `zym rules show`.
    # Relations: calls (CUDA API calls), gpu (kernels/copies/memsets), gaps (GPU idle gaps), paths,
    # windows (capture cut in 50 windows). `zym rules show RELATION` lists its columns.
    relation: gpu
    where:                              # every condition must hold
      kind: kernel                      # a bare value means eq
      dur_ns: {lt: 5000}                # eq ne lt le gt ge between in not_in regex not_regex is_null
      # any_of: [{...}, {...}]          # one of several conditions
      # not: {name: {regex: "nccl"}}
    group_by: [code_site]               # default: the code line; [] = one finding overall
    measures:                           # standard ones (count, gpu_ns, ...) come for free
      share: {div: [gpu_ns, total_gpu_ns]}
      # slowest: {agg: max, of: dur_ns, where: {...}}  # count sum mean max min median p90 p99 n_unique
      # relative: {rel: share, to: median}            # this group / the median group
    having:                             # thresholds on measures
      count: {ge: 1000}
    cost: gpu_ns                        # the measure (ns) findings are ranked by
    # {name:fmt} substitutes; {torch_op|api}: the first with a value; {? ... ?}: left out
    # when a placeholder in it has no value (eBPF captures have no torch ops).
    message: >
      {count} kernels under 5 µs at {site} ({gpu_ns:ns}, {share:pct} of GPU time).
    fix: Fuse the small ops (torch.compile) or capture the loop in a CUDA graph.
"""
