"""Progress display on stderr for long loads: a spinner that names the current stage."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console


@contextlib.contextmanager
def stage_progress(enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """Yield a callback that shows its argument as the current stage (nothing when disabled
    or when stderr is not a terminal)."""
    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield lambda _stage: None
        return
    with console.status("starting", spinner="dots") as status:
        yield lambda stage: status.update(f"{stage}…")
