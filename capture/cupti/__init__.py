"""zym's GPU side: CUPTI activity recorded inside the target, decoded and joined to eBPF stacks.

* ``agent.py`` runs in the target (stdlib + ctypes), started by ``bootstrap/sitecustomize.py``;
* ``decode.py`` turns its spool files into ``api`` and ``gpu`` frames, in bulk;
* ``clock.py`` fits CUPTI time to CLOCK_MONOTONIC;
* ``finalize.py`` merges them with the eBPF side (``zym.analysis.join``) into one capture file.

See docs/capture-gpu.md.
"""
from __future__ import annotations

import os
from pathlib import Path

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"


def agent_env(env: dict[str, str] | None = None, agent_dir: str | None = None,
              nvtx: bool = False, shapes: bool = False) -> dict[str, str]:
    """The environment to start a target with zym's dormant agent (``zym run``): the bootstrap
    first on PYTHONPATH, ``ZYM_AGENT=1`` (and ``ZYM_AGENT_DIR`` when given; ``ZYM_AGENT_NVTX=1``
    with ``nvtx``: the agent readies NVTX recording at the program's start; ``ZYM_AGENT_SHAPES=1``
    with ``shapes``: it wraps torch's matmul entry points at torch's import, recording their
    shapes while a capture has it on).

    >>> e = agent_env({"PYTHONPATH": "/app"})
    >>> e["PYTHONPATH"].endswith(":/app"), e["ZYM_AGENT"], "ZYM_CUPTI_DIR" in e
    (True, '1', False)
    """
    env = _with_bootstrap(env)
    env.pop("ZYM_CUPTI_DIR", None)
    env["ZYM_AGENT"] = "1"
    if nvtx:
        env["ZYM_AGENT_NVTX"] = "1"
    if shapes:
        env["ZYM_AGENT_SHAPES"] = "1"
        env["ZYM_SHAPES_OPS"] = shapes_env(True)["ZYM_SHAPES_OPS"]
    if agent_dir:
        env["ZYM_AGENT_DIR"] = agent_dir
    return env


def shapes_env(shapes: bool) -> dict[str, str]:
    """The target's variables for operator shapes (``--shapes``): on, for the operators whose
    shapes the analysis reads (the matmul family it sizes), or explicitly off."""
    if not shapes:
        return {"ZYM_SHAPES": "0"}
    scope = os.environ.get("ZYM_SHAPES_SCOPE")
    if scope not in (None, "", "entry", "all"):
        from zym.schemas.errors import CaptureError

        raise CaptureError(f"ZYM_SHAPES_SCOPE={scope!r}: give entry (the default: torch's "
                           "matmul entry points) or all (every operator)")
    from zym.analysis.matmul import MATMUL_OPS  # no polars: importable on lean GPU hosts

    return {"ZYM_SHAPES": "1", "ZYM_SHAPES_OPS": ",".join(MATMUL_OPS)}


def _with_bootstrap(env: dict[str, str] | None) -> dict[str, str]:
    if not (BOOTSTRAP_DIR / "sitecustomize.py").exists():
        from zym.schemas.errors import CaptureError

        raise CaptureError(f"zym's CUPTI bootstrap is missing ({BOOTSTRAP_DIR}/sitecustomize.py): "
                           "this zym was packaged without it; reinstall zym")
    env = dict(os.environ if env is None else env)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(BOOTSTRAP_DIR) + (os.pathsep + old if old else "")
    return env


def target_env(spool_dir: str | os.PathLike, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment to start a target with so that its CUPTI collector writes to
    ``spool_dir``: the bootstrap first on PYTHONPATH, ``ZYM_CUPTI_DIR`` set.

    >>> e = target_env("/tmp/s", {"PYTHONPATH": "/app"})
    >>> e["PYTHONPATH"].endswith(":/app"), e["ZYM_CUPTI_DIR"]
    (True, '/tmp/s')
    """
    env = _with_bootstrap(env)
    env["ZYM_CUPTI_DIR"] = str(spool_dir)
    return env
