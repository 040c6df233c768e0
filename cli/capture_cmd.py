"""`zym capture`: placeholder until the eBPF collector lands (issue 5)."""
from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    pass
