"""Names of a package resolved on first use (PEP 562), so importing the package, or one light
module of it, does not import what its other modules need (polars, pyarrow)."""
from __future__ import annotations

from collections.abc import Callable
from importlib import import_module


def lazy_names(package: str, namespace: dict, home: dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package``: ``name`` is imported from the submodule
    ``home[name]`` the first time it is asked for, then kept in ``namespace``."""
    def __getattr__(name: str) -> object:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f".{home[name]}", package), name)
        namespace[name] = value
        return value
    return __getattr__
