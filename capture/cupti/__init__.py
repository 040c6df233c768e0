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
              nvtx: bool = False) -> dict[str, str]:
    """The environment to start a target with zym's dormant agent (``zym run``): the bootstrap
    first on PYTHONPATH, ``ZYM_AGENT=1`` (and ``ZYM_AGENT_DIR`` when given; ``ZYM_AGENT_NVTX=1``
    with ``nvtx``: the agent readies NVTX recording at the program's start).

    >>> e = agent_env({"PYTHONPATH": "/app"})
    >>> e["PYTHONPATH"].endswith(":/app"), e["ZYM_AGENT"], "ZYM_CUPTI_DIR" in e
    (True, '1', False)
    """
    env = _with_bootstrap(env)
    env.pop("ZYM_CUPTI_DIR", None)
    env["ZYM_AGENT"] = "1"
    if nvtx:
        env["ZYM_AGENT_NVTX"] = "1"
    if agent_dir:
        env["ZYM_AGENT_DIR"] = agent_dir
    return env


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
