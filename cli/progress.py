"""Progress display on stderr for long loads: a spinner that names the current stage."""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def stage_progress(enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """Yield a callback that shows its argument as the current stage (nothing when disabled
    or when stderr is not a terminal); while numba compiles one of zym's loops, the stage is
    shown with :data:`zym.analysis.compiled.COMPILING` beside it."""
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
        shown: dict[str, str | None] = {"stage": "starting", "compiling": None}

        def draw(at_once: bool = False) -> None:
            text = shown["stage"] + (f": {shown['compiling']}" if shown["compiling"] else "")
            # a new spinner draws at once; a new text alone waits for rich's next tick
            # (1/12.5 s), which a short compile's start and end could both miss
            status.update(f"{text}…", **({"spinner": "dots"} if at_once else {}))

        def stage(text: str) -> None:
            shown["stage"] = text
            draw()

        def compiling(text: str | None) -> None:
            shown["compiling"] = text
            draw(at_once=True)

        stop = notify_compiles(compiling)
        try:
            yield stage
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
