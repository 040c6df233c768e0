"""`zym rules list|show|lint|test|new`: browse, check, test and start rule packs."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from .errors import exit_on_error

rules_app = typer.Typer(
    name="rules", no_args_is_help=True,
    help="Browse, check, test and write rule packs (declarative YAML; see docs/rules.md).\n\n"
         "Example: zym rules list; zym rules lint mypack.yaml",
)

ExtraPacks = Annotated[list[Path] | None, typer.Option(
    "--rules", "-r", help="Also load this pack (file or folder); repeatable.")]


def _packs(extra: list[Path] | None):
    from zym.rules import load_packs

    return load_packs(extra or ())


@rules_app.command("list")
def list_rules(rules: ExtraPacks = None,
               as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False
               ) -> None:
    """List every rule: built-in packs, entry-point packs and --rules packs.

    Example: zym rules list --rules my_rules/
    """
    with exit_on_error():
        packs = _packs(rules)
    rows = [{"id": r.id, "severity": r.severity, "relation": r.relation, "title": r.title,
             "source": r.source} for p in packs for r in p.rules]
    if as_json:
        json.dump(rows, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    width = max((len(r["id"]) for r in rows), default=10)
    for r in rows:
        typer.echo(f"{r['id']:<{width}}  {r['severity']:<7}  {r['relation']:<7}  {r['title']}")


@rules_app.command("show")
def show(rule_id: Annotated[str, typer.Argument(help="A rule id, or a relation name (calls, "
                                                     "gpu, gaps, windows) to list its columns.",
                                                show_default=False)],
         rules: ExtraPacks = None) -> None:
    """Show one rule (doc, definition, message, fix) or one relation's columns.

    Example: zym rules show syncs.scalar-readback
    """
    import yaml
    from zym.analysis.relations import COLUMNS, STANDARD_MEASURES

    if rule_id in COLUMNS:
        typer.echo(f"relation {rule_id}: columns")
        for col, doc in COLUMNS[rule_id].items():
            typer.echo(f"  {col:<16} {doc}")
        typer.echo("standard measures: " + ", ".join(STANDARD_MEASURES[rule_id])
                   + "; constants: total_gpu_ns, window_ns")
        return
    with exit_on_error():
        packs = _packs(rules)
        found = [r for p in packs for r in p.rules if r.id == rule_id]
        if not found:
            from zym.rules import RuleError

            ids = sorted(r.id for p in packs for r in p.rules)
            raise RuleError(f"no rule {rule_id!r}; rules: {', '.join(ids)}")
    rule = found[0]
    typer.echo(f"{rule.id}  ({rule.severity}, from {rule.source})")
    typer.echo(f"{rule.title}\n")
    typer.echo(rule.doc + "\n")
    definition = {k: v for k, v in rule.to_dict().items()
                  if k not in ("id", "title", "severity", "message", "fix")}
    typer.echo(yaml.safe_dump(definition, sort_keys=False, allow_unicode=True).rstrip())
    typer.echo(f"\nmessage: {rule.message}\nfix: {rule.fix}")


@rules_app.command("lint")
def lint(paths: Annotated[list[Path], typer.Argument(help="Pack files or folders.",
                                                     show_default=False)]) -> None:
    """Check rule packs: structure (schemas/rule.schema.json), columns, measures, templates,
    rule ids against the built-in packs, and a run of every rule by the rule engine on a
    synthetic capture: a pack that lints clean runs clean.

    Exits 2 at the first problem, naming the file, the rule and the field.

    Example: zym rules lint my_rules/
    """
    from zym.rules import RuleError, builtin_pack_paths, load_pack
    from zym.rules import pack_files as files_of
    from zym.rules.packcheck import run_against_engine
    from zym.schemas.output import display

    with exit_on_error():
        builtin = {p.resolve() for p in builtin_pack_paths()}
        taken = {r.id: str(f) for f in builtin for r in load_pack(f).rules}
        for path in paths:
            for f in files_of(path):
                pack = load_pack(f)
                if f.resolve() not in builtin:
                    for r in pack.rules:
                        if r.id in taken:
                            raise RuleError(f"{display(f)}: rule {r.id}: field id: already "
                                            f"defined by the built-in pack {taken[r.id]}")
                run_against_engine(pack, lambda rid, msg, f=f: RuleError(
                    f"{display(f)}: rule {rid}: {msg}"))
                typer.echo(f"ok  {display(f)}: pack {pack.name}, {len(pack.rules)} rule(s)")


@rules_app.command("test")
def test(pack: Annotated[Path, typer.Argument(help="The pack file to test.", show_default=False)],
         fixtures: Annotated[Path | None, typer.Option(
             help="Folder of *.expect.yaml cases [default: PACK.tests/ beside the pack].")] = None
         ) -> None:
    """Run a pack against fixture captures and the findings expected of them.

    Exits 1 when a case fails.

    Example: zym rules test my_rules/slow.yaml
    """
    from zym.rules.authoring import run_pack_tests

    with exit_on_error():
        results = run_pack_tests(pack, fixtures)
    for r in results:
        typer.echo(f"{'PASS' if r.passed else 'FAIL'}  {r.case}")
        for p in r.problems:
            typer.echo(f"      {p}")
        if not r.passed:
            typer.echo(f"      fired: {', '.join(r.fired) or 'nothing'}")
    failed = sum(not r.passed for r in results)
    typer.echo(f"{len(results) - failed} passed, {failed} failed")
    if failed:
        raise typer.Exit(1)


@rules_app.command("new")
def new(name: Annotated[str, typer.Argument(help="Pack name (lowercase, e.g. myteam).",
                                            show_default=False)],
        output: Annotated[Path | None, typer.Option(
            "--output", "-o", help="File to write [default: NAME.yaml]; - for stdout.")] = None,
        force: Annotated[bool, typer.Option("--force", help="Overwrite.")] = False) -> None:
    """Write a commented rule-pack template to start from.

    Example: zym rules new myteam && zym rules lint myteam.yaml
    """
    import re

    from zym.rules.authoring import new_pack_text
    from zym.schemas.errors import InputError
    from zym.schemas.output import atomic_output, display

    with exit_on_error():
        if not re.fullmatch(r"[a-z][a-z0-9_-]*", name):
            raise InputError(f"pack name {name!r}: use lowercase letters, digits, - and _")
        text = new_pack_text(name)
        if output is not None and str(output) == "-":
            sys.stdout.write(text)
            return
        out = output or Path(f"{name}.yaml")
        with atomic_output(out, force) as tmp:
            tmp.write_text(text, encoding="utf-8")
    typer.echo(f"wrote {display(out)}; next: zym rules lint {display(out)}")


def register(app: typer.Typer) -> None:
    app.add_typer(rules_app, name="rules")
