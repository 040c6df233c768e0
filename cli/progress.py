"""Progress display on stderr for long loads: a spinner that names the current stage."""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def stage_progress(enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """Yield a callback that shows its argument as the current stage (nothing when disabled
    or when stderr is not a terminal)."""
    if not enabled or not _may_be_terminal():
        yield lambda _stage: None
        return
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda _stage: None
        return
    from zym.analysis.compiled import notify_compiles

    with console.status("starting", spinner="dots") as status:
        shown: list[str | None] = ["starting", None]  # the stage, and a compile under way

        def show(stage: str | None = None, compiling: str | None | bool = False) -> None:
            if stage is not None:
                shown[0] = stage
            if compiling is not False:
                shown[1] = compiling
            text = f"{shown[0]}…" if shown[1] is None else f"{shown[0]}: {shown[1]}…"
            # a compile's start and end drawn at once (rich redraws a new text at its next
            # tick, 1/12.5 s, otherwise: a short compile could come and go unseen)
            status.update(text, **({"spinner": "dots"} if compiling is not False else {}))

        stop = notify_compiles(lambda text: show(compiling=text))
        try:
            yield lambda stage: show(stage)
        finally:
            stop()


def _may_be_terminal() -> bool:
    """False where rich's Console(stderr=True).is_terminal is surely False (stderr not a tty,
    and neither TTY_COMPATIBLE nor FORCE_COLOR says otherwise), so that rich (~0.04 s of
    imports) is not imported for nothing: `zym analyze ... 2>log`, pipes, CI."""
    if "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ:
        return True
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream: rich says False too
        return False
