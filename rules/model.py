"""Rule packs as validated data: YAML -> checked ``Pack``/``Rule`` objects.

Loading never runs Python from a rule file: YAML is read with the safe loader (a tag that
would build a Python object is an error), the structure is checked against
``schemas/rule.schema.json`` (by the small validator below, which implements the subset of
JSON Schema that file uses, so `zym analyze` does not pay for importing a full validator),
and then every name is checked against the relation it reads: columns, measures, template
placeholders and regular expressions. Every error names the file, the rule and the field.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from zym.analysis.relations import COLUMNS, STANDARD_MEASURES
from zym.schemas.errors import InputError

SEVERITIES = ("info", "warning", "error")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
# Keys that someone might try in order to run code from a rule; named in the error.
CODE_KEYS = frozenset({"eval", "exec", "code", "python", "lambda", "script", "expr", "import",
                       "function", "callable", "map_elements", "apply"})
# ``{name}``, ``{name:fmt}``, ``{a|b:fmt}`` (the first of the names that has a value).
TEMPLATE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\|[A-Za-z_][A-Za-z0-9_]*)*)(?::([a-z]+))?\}")
# ``{? ... ?}``: a part rendered only when every placeholder in it has a value.
OPTIONAL = re.compile(r"\{\?(.*?)\?\}", re.DOTALL)
PARTS = re.compile(f"{OPTIONAL.pattern}|{TEMPLATE.pattern}", re.DOTALL)  # rendering, left to right
FORMATS = frozenset({"ns", "bytes", "pct", "x", "int", "float", "str"})
# Variables every message template may use besides the rule's measures.
# ``user_instance``: the same as ``instance``, but only where the site is a user function (a
# count per call of "the enclosing function" of no user frame means nothing: use it in {? ?}).
# Event columns a group is labelled with: the first value of its events (rules.engine).
EVENT_LABELS = ("api", "copy_kind", "src_mem", "dst_mem", "dtype", "name", "cause", "kind",
                "precision", "op_class", "function", "prev_copy_site")
LABELS = ("site", "what", "instance", "user_instance", "user_function", "user_source",
          "mechanism", "torch_op", "size_op", "py_api", *EVENT_LABELS)
CONSTANTS = ("total_gpu_ns", "window_ns")


def template_names(text: str) -> set[str]:
    """Every name a template reads, alternatives included."""
    return {name for m in TEMPLATE.finditer(text) for name in m.group(1).split("|")}


class RuleError(InputError):
    """A rule file that cannot be used: the message names the file, the rule and the field."""


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    severity: str
    doc: str
    relation: str
    message: str
    fix: str
    where: dict = field(default_factory=dict)
    group_by: tuple[str, ...] = ("code_site",)
    measures: dict = field(default_factory=dict)
    having: dict = field(default_factory=dict)
    cost: str | None = None
    supersedes: tuple[str, ...] = ()
    saving: dict = field(default_factory=lambda: {"model": "none"})
    what: str = ""  # what the code does, when the capture cannot say (no source, no built-ins)
    examples: int = 5
    # The GPUs it applies to: {has: [maths], lacks: [maths]} (zym.analysis.throughput.gpu_maths);
    # empty: every GPU.
    gpus: dict = field(default_factory=dict)
    pack: str = ""
    source: str = ""

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("id", "title", "severity", "relation", "where",
                                              "measures", "having", "cost", "message", "fix")}
        out["group_by"] = list(self.group_by)
        if self.supersedes:
            out["supersedes"] = list(self.supersedes)
        if self.gpus:
            out["gpus"] = dict(self.gpus)
        out["saving"] = dict(self.saving)
        return out


@dataclass(frozen=True)
class Pack:
    name: str
    rules: tuple[Rule, ...]
    source: str
    doc: str = ""


# ---------------------------------------------------------------------------------------------
# Loading

def load_pack(path: str | Path) -> Pack:
    """Read and validate one pack file (validated once per content and zym: a pack that
    validated before is taken from ``zym.rules.packcache``)."""
    from .packcache import cached

    return cached(_read_pack_text(Path(path)), str(path), parse_pack)


def _read_pack_text(path: Path) -> str:
    """A pack's text: a regular file of at most MAX_PACK_BYTES, UTF-8 (one-line errors)."""
    from .packcheck import MAX_PACK_BYTES

    try:
        if path.exists() and not path.is_file():
            raise RuleError(f"{path}: cannot read rule pack (not a regular file)")
        with open(path, "rb") as f:
            data = f.read(MAX_PACK_BYTES + 1)
    except OSError as e:
        raise RuleError(f"{path}: cannot read rule pack ({e.strerror or e})") from e
    if len(data) > MAX_PACK_BYTES:
        raise RuleError(f"{path}: larger than {MAX_PACK_BYTES >> 10} KiB; a rule pack is a few kB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RuleError(f"{path}: not UTF-8 text (byte {e.start}); save the pack as UTF-8"
                        ) from None


def parse_pack(text: str, source: str = "<string>") -> Pack:
    """Validate the YAML text of one pack; ``source`` names it in errors."""
    import yaml

    from .packcheck import check_yaml_bounds

    check_yaml_bounds(text, lambda msg: RuleError(f"{source}: {msg}"))
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        doc = yaml.load(text, Loader=loader)
    except yaml.constructor.ConstructorError as e:
        raise RuleError(f"{source}: {_yaml_where(e)}YAML tag {e.problem.split()[-1] if e.problem else ''}"
                        " would construct a Python object; rules are data and cannot run code"
                        ) from e
    except yaml.YAMLError as e:
        raise RuleError(f"{source}: not valid YAML ({_one_line(e)})") from e
    if not isinstance(doc, dict):
        raise RuleError(f"{source}: a rule pack is a mapping with keys pack, version, rules")
    _check_code_keys(doc, source)
    problem = validate(doc, schema())
    if problem:
        raise RuleError(_locate(source, doc, *problem))
    pack = doc["pack"]
    rules = []
    seen: set[str] = set()
    for i, raw in enumerate(doc["rules"]):
        rule = _rule(raw, pack, source)
        if rule.id in seen:
            raise RuleError(f"{source}: rule {rule.id}: field id: duplicate rule id")
        seen.add(rule.id)
        rules.append(rule)
    return Pack(pack, tuple(rules), source, doc.get("doc", ""))


def _yaml_where(e: Any) -> str:
    mark = getattr(e, "problem_mark", None)
    return f"line {mark.line + 1}: " if mark else ""


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def _check_code_keys(doc: Any, source: str, path: str = "", rule: str = "") -> None:
    if isinstance(doc, dict):
        rule = doc.get("id", rule) if isinstance(doc.get("id"), str) else rule
        for k, v in doc.items():
            where = f"{path}.{k}" if path else str(k)
            if str(k).lower() in CODE_KEYS:
                raise RuleError(f"{source}: {_rule_part(rule)}field {_strip(where)}: {k!r} "
                                "looks like code; rules are data and cannot run code (use "
                                "where/measures/having, see docs/rules.md)")
            _check_code_keys(v, source, where, rule)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            _check_code_keys(v, source, f"{path}[{i}]", rule)


def _rule_part(rule: str) -> str:
    return f"rule {rule}: " if rule else ""


def _strip(path: str) -> str:
    """``rules[3].where.kind`` -> ``where.kind`` (the rule is named separately)."""
    return re.sub(r"^rules\[\d+\]\.?", "", path) or "(rule)"


def _locate(source: str, doc: dict, path: str, message: str) -> str:
    m = re.match(r"^rules\[(\d+)\]", path)
    rule = ""
    if m:
        raw = doc["rules"][int(m.group(1))]
        rule = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) \
            else f"#{int(m.group(1)) + 1}"
    field_path = _strip(path) if m else (path or "(top level)")
    return f"{source}: {_rule_part(rule)}field {field_path}: {message}"


# ---------------------------------------------------------------------------------------------
# Semantic checks: names against the relation

def _rule(raw: dict, pack: str, source: str) -> Rule:
    rid = raw["id"]

    def fail(field_name: str, message: str) -> RuleError:
        return RuleError(f"{source}: rule {rid}: field {field_name}: {message}")

    if not rid.startswith(pack + "."):
        raise fail("id", f"must start with the pack name ({pack}.)")
    relation = raw["relation"]
    columns = COLUMNS[relation]
    _check_where(raw.get("where", {}), columns, "where", fail)
    group_by = tuple(raw.get("group_by", ["code_site"]))
    for i, col in enumerate(group_by):
        if col not in columns:
            raise fail(f"group_by[{i}]", _unknown_column(col, relation))
    measures = raw.get("measures", {})
    known = set(STANDARD_MEASURES[relation]) | set(CONSTANTS)
    for name, spec in measures.items():
        where = f"measures.{name}"
        if name in STANDARD_MEASURES[relation]:
            raise fail(where, f"{name!r} is a standard measure of {relation}; pick another name")
        if "agg" in spec:
            if spec["agg"] != "count" and "of" not in spec:
                raise fail(where, f"agg {spec['agg']} needs 'of: COLUMN'")
            if "of" in spec and spec["of"] not in columns:
                raise fail(f"{where}.of", _unknown_column(spec["of"], relation))
            if (spec["agg"] == "top") != ("by" in spec):
                raise fail(where, "agg top needs 'by: COLUMN' (the row whose value is largest), "
                                  "and only top takes 'by'")
            if "by" in spec and spec["by"] not in columns:
                raise fail(f"{where}.by", _unknown_column(spec["by"], relation))
            _check_where(spec.get("where", {}), columns, f"{where}.where", fail)
        else:
            operands = (spec.get("div") or spec.get("mul") or spec.get("sub") or spec.get("add")
                        or [spec.get("rel")])
            for j, op in enumerate(operands):
                if isinstance(op, str) and op not in known:
                    raise fail(where, f"unknown measure {op!r} (defined so far: "
                                      f"{', '.join(sorted(known))})")
        known.add(name)
    for name, cond in raw.get("having", {}).items():
        if name not in known:
            raise fail(f"having.{name}", f"unknown measure {name!r}; measures: "
                                         f"{', '.join(sorted(known))}")
        _check_condition(cond, f"having.{name}", fail)
    cost = raw.get("cost")
    if cost is not None and cost not in known:
        raise fail("cost", f"unknown measure {cost!r}")
    saving = raw.get("saving", {"model": "none"})
    _check_saving(saving, relation, known, fail)
    _check_only(saving, columns, "saving", fail)
    if "instead" in saving:
        instead = saving["instead"]
        if saving["model"] == "none":
            raise fail("saving.instead", "a second fix needs a first: model none estimates none")
        _check_saving(instead, relation, known, fail, "saving.instead")
        _check_only(instead, columns, "saving.instead", fail)
    names = known | set(LABELS) | set(group_by)
    for key in ("message", "fix", "title"):
        _check_template(raw[key], names, lambda msg, key=key: fail(key, msg))
    return Rule(id=rid, title=raw["title"], severity=raw["severity"], doc=raw["doc"].strip(),
                relation=relation, message=raw["message"].strip(), fix=raw["fix"].strip(),
                where=raw.get("where", {}), group_by=group_by, measures=measures,
                having=raw.get("having", {}), cost=cost,
                supersedes=tuple(raw.get("supersedes", ())), saving=dict(saving),
                what=raw.get("what", ""),
                examples=raw.get("examples", 5), gpus=dict(raw.get("gpus", {})),
                pack=pack, source=source)


# Which relations each saving model can read its events from (zym.rules.savings).
SAVING_RELATIONS = {
    "batch": ("calls",), "remove": ("calls", "gpu", "attention"), "unblock": ("calls", "gaps"),
    "pin": ("calls",), "async": ("calls",), "speedup": ("gpu",),
    "shorten-gaps": ("gaps", "calls"), "cpu-work": ("stretches", "steps"), "cuda-graph": ("steps",),
    "autograd-off": ("steps",), "eval-mode": ("steps",), "items": ("items",),
    "fused-attention": ("attention",),
    "none": ("calls", "gpu", "attention", "gaps", "paths", "steps", "items", "stretches",
             "windows"),
}


def _check_saving(saving: dict, relation: str, measures: set[str], fail,
                  path: str = "saving") -> None:
    model = saving["model"]
    if relation not in SAVING_RELATIONS[model]:
        raise fail(f"{path}.model", f"{model} replays events of relation "
                                    f"{' or '.join(SAVING_RELATIONS[model])}, not {relation}")
    if model == "speedup" and ("to" in saving) == ("factor" in saving):
        raise fail(path, "speedup takes one of to: PRECISION or factor: MEASURE")
    if "factor" in saving and saving["factor"] not in measures:
        raise fail(f"{path}.factor", f"unknown measure {saving['factor']!r}")
    for key, only in (("keep", "batch"), ("alone", "batch"), ("body", "batch"), ("to", "speedup"),
                      ("factor", "speedup"), ("work", "remove")):
        if key in saving and model != only:
            raise fail(f"{path}.{key}", f"{key} applies to model {only} only")


def _check_only(saving: dict, columns: dict, path: str, fail) -> None:
    """A saving model's ``only``: a where mapping over the relation's columns."""
    if "only" in saving:
        if not isinstance(saving["only"], dict) or not saving["only"]:
            raise fail(f"{path}.only", "only takes a where mapping (the events the fix edits)")
        _check_where(saving["only"], columns, f"{path}.only", fail)


def _unknown_column(col: str, relation: str) -> str:
    return f"unknown column {col!r} of relation {relation}; columns: {', '.join(COLUMNS[relation])}"


def _check_where(where: dict, columns: dict, path: str, fail) -> None:
    for key, cond in where.items():
        if key == "any_of":
            for i, sub in enumerate(cond):
                _check_where(sub, columns, f"{path}.any_of[{i}]", fail)
        elif key == "not":
            _check_where(cond, columns, f"{path}.not", fail)
        else:
            if key not in columns:
                raise fail(f"{path}.{key}", _unknown_column(key, _relation_of(columns)))
            _check_condition(cond, f"{path}.{key}", fail)


def _relation_of(columns: dict) -> str:
    return next(r for r, c in COLUMNS.items() if c is columns)


def _check_template(text: str, names: set[str], fail: Any) -> None:
    """Placeholders name known values with known formats; ``{? ?}`` parts do not nest; no
    other braces (templates substitute names, they never evaluate)."""
    for m in TEMPLATE.finditer(text):
        for name in m.group(1).split("|"):
            if name not in names:
                raise fail(f"unknown placeholder {{{name}}}; use a measure or one of "
                           f"{', '.join(LABELS)}")
        if m.group(2) and m.group(2) not in FORMATS:
            raise fail(f"unknown format :{m.group(2)} in {{{m.group(0)[1:-1]}}}; "
                       f"formats: {', '.join(sorted(FORMATS))}")
    flat = OPTIONAL.sub(lambda m: m.group(1), text)
    if "{?" in flat or "?}" in flat:
        raise fail("an optional part {? ... ?} that is unclosed or nested in another")
    stray = TEMPLATE.sub("", flat)
    if "{" in stray or "}" in stray:
        raise fail("a brace that is not a {placeholder}; templates only substitute names, "
                   "they do not evaluate expressions")


def _check_condition(cond: Any, path: str, fail) -> None:
    if not isinstance(cond, dict):
        return
    for op in ("regex", "not_regex"):
        if op in cond:
            _check_regex(cond[op], f"{path}.{op}", fail)
    if "between" in cond and cond["between"][0] > cond["between"][1]:
        raise fail(f"{path}.between", "lower bound is above the upper bound")


def _check_regex(pattern: Any, path: str, fail) -> None:
    """A regular expression that both Python and polars (which runs it) accept."""
    from .packcheck import polars_regex_problem

    if not isinstance(pattern, str):
        raise fail(path, "a regular expression is a string")
    try:
        re.compile(pattern)
    except re.error as e:
        raise fail(path, f"invalid regular expression ({e})") from e
    problem = polars_regex_problem(pattern)
    if problem:
        raise fail(path, f"polars, which runs rule patterns, cannot compile it (no look-around "
                         f"or back-references): {problem}")


# ---------------------------------------------------------------------------------------------
# A validator for the subset of JSON Schema that rule.schema.json uses

@lru_cache(maxsize=1)
def schema() -> dict:
    """The rule-pack JSON Schema (``zym/schemas/rule.schema.json``)."""
    text = resources.files("zym.schemas").joinpath("rule.schema.json").read_text("utf-8")
    return json.loads(text)


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def validate(value: Any, node: dict, root: dict | None = None, path: str = ""
             ) -> tuple[str, str] | None:
    """First problem of ``value`` against schema ``node`` as ``(path, message)``, or None.

    Supports: $ref (local), type, enum, const, pattern, minLength, minimum, required,
    properties, patternProperties, additionalProperties, minProperties, items, minItems,
    maxItems, anyOf.
    """
    root = root or node
    if "$ref" in node:
        target = root
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return validate(value, target, root, path)
    if "anyOf" in node:
        problems = [validate(value, sub, root, path) for sub in node["anyOf"]]
        if all(problems):
            # The branch whose problem lies deepest is the one the author meant.
            return max(problems, key=lambda p: (len(p[0]), "not one of" not in p[1]))
        return None
    types = node.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        if not any(_is_type(value, t) for t in names):
            return path, f"expected {' or '.join(names)}, got {_describe(value)}"
    if "enum" in node and value not in node["enum"]:
        return path, f"{value!r} is not one of {', '.join(map(str, node['enum']))}"
    if "const" in node and value != node["const"]:
        return path, f"must be {node['const']!r}, got {value!r}"
    if isinstance(value, str):
        if len(value) < node.get("minLength", 0):
            return path, "must not be empty"
        if "pattern" in node and not re.search(node["pattern"], value):
            return path, f"{value!r} does not match {node['pattern']}"
    if isinstance(value, (int, float)) and "minimum" in node and value < node["minimum"]:
        return path, f"must be at least {node['minimum']}"
    if isinstance(value, list):
        if len(value) < node.get("minItems", 0):
            return path, f"needs at least {node['minItems']} item(s)"
        if "maxItems" in node and len(value) > node["maxItems"]:
            return path, f"takes at most {node['maxItems']} item(s)"
        if "items" in node:
            for i, item in enumerate(value):
                p = validate(item, node["items"], root, f"{path}[{i}]")
                if p:
                    return p
    if isinstance(value, dict):
        return _validate_object(value, node, root, path)
    return None


def _validate_object(value: dict, node: dict, root: dict, path: str) -> tuple[str, str] | None:
    for key in node.get("required", ()):
        if key not in value:
            return (f"{path}.{key}" if path else key), "missing (required field)"
    if len(value) < node.get("minProperties", 0):
        return path, "must not be empty"
    props, patterns = node.get("properties", {}), node.get("patternProperties", {})
    for key, item in value.items():
        sub = f"{path}.{key}" if path else str(key)
        if key in props:
            p = validate(item, props[key], root, sub)
        else:
            matched = [s for pat, s in patterns.items() if re.search(pat, str(key))]
            if matched:
                p = validate(item, matched[0], root, sub)
            elif node.get("additionalProperties", True) is False:
                allowed = ", ".join(props) or "names matching " + ", ".join(patterns)
                p = (sub, f"unknown field {key!r}; allowed: {allowed}")
            elif isinstance(node.get("additionalProperties"), dict):
                p = validate(item, node["additionalProperties"], root, sub)
            else:
                p = None
        if p:
            return p
    return None


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__) + ("" if isinstance(value, (dict, list)) else f" ({value!r})")
