"""Options that several commands share, declared once."""
from __future__ import annotations

import typer


def memory_budget_option(use: str, says: str, each: bool = False):
    """``--memory-budget SIZE`` (cli/bodies.budget_bytes reads it): ``use``, what may use the
    memory and an example; ``says``, what tells the user it sampled; ``each``: the default
    is per analysis, several held at once."""
    return typer.Option(
        "--memory-budget", metavar="SIZE", show_default=False,
        help=f"Memory {use}: a capture whose analysis would take more is analysed on evenly "
             f"spread slices of its time that fit, and {says} says so [default: half the "
             f"memory available{' for each' if each else ''}; a capture past it: slices that "
             f"fit 1 GiB].")
