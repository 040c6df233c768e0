"""The `zym` command: a thin typer app over the library.

Each command lives in its own module and is registered here, from the table in
cli/commands.py. Importing this module must not import bcc or pyarrow, so `zym analyze` starts
fast and works without root. The console script is cli/entry.py, which answers `zym` and
`zym --help` from the same table without importing typer.
"""
from __future__ import annotations

import importlib

import typer

from .commands import COMMANDS, DESCRIPTION

app = typer.Typer(
    name="zym",
    help=DESCRIPTION,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help (click's formatter): rich's help panels cost ~0.12 s of imports on every
    # `--help`; the help text uses no markup.
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from .entry import version_line

        typer.echo(version_line())
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print zym's version and exit.")) -> None:
    pass


def _register() -> None:
    for command in COMMANDS:
        importlib.import_module(f"{__package__}.{command.module}").register(app)
    summaries = {c.name: c.summary for c in COMMANDS}
    for info in app.registered_commands:
        info.short_help = summaries[info.name]
    for group in app.registered_groups:
        group.short_help = summaries[group.name or group.typer_instance.info.name]


_register()

if __name__ == "__main__":
    from .entry import interruptible

    interruptible(app)
