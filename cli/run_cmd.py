"""`zym run -- COMMAND`: start a program with zym's dormant agent, so that `zym capture --pid`
can later record it with its GPU side. Library: zym.capture.cupti (agent.Dormant, remote)."""
from __future__ import annotations

import os
import shutil
import sys
from typing import Annotated

import typer

from .errors import exit_on_error

HELP = (
    "Run COMMAND with zym's dormant agent, to profile it later while it runs.\n\n"
    "The agent loads nothing and records nothing until `zym capture --pid PID` switches it on: "
    "one thread looks at a control file five times a second. When the capture ends it switches "
    "CUPTI off and detaches it, and the program runs on as before. The program keeps this PID "
    "(zym execs it).\n\n"
    "--nvtx readies NVTX ranges for recording (NVTX reads its injection library once, at the "
    "program's first NVTX call): the program then loads libcupti at that call, before any "
    "capture; without it, captures of this program have no NVTX ranges.\n\n"
    "--shapes wraps torch's matmul entry points when torch is imported, so that captures record "
    "the input shapes of its matmuls (as `zym capture --shapes` does); while no capture is on, "
    "each matmul call pays one flag check.\n\n"
    "Example: zym run -- python serve.py --port 8000\n\n"
    "Then: sudo zym capture --pid PID --duration 30 -o serve.parquet"
)


def run(
    command: Annotated[list[str], typer.Argument(help="The program and its arguments, after --.")],
    agent_dir: Annotated[str | None, typer.Option(
        "--agent-dir", help="Where the agent keeps its control folder (default /tmp/zym-agent; "
                            "ZYM_AGENT_DIR).")] = None,
    nvtx: Annotated[bool, typer.Option(
        "--nvtx", help="Record NVTX ranges in later captures (loads libcupti at the program's "
                       "first NVTX call; ZYM_AGENT_NVTX=1).")] = False,
    shapes: Annotated[bool, typer.Option(
        "--shapes", help="Record the input shapes of torch's matmuls in later captures "
                         "(ZYM_AGENT_SHAPES=1).")] = False,
) -> None:
    from zym.capture.cupti import agent_env
    from zym.schemas.errors import CaptureError

    with exit_on_error():
        if not command:
            raise CaptureError("give the command to run after --, e.g. zym run -- python serve.py")
        env = agent_env(agent_dir=agent_dir, nvtx=nvtx, shapes=shapes)
        if shutil.which(command[0], path=env.get("PATH")) is None:
            raise CaptureError(f"cannot run {command[0]!r}: not found or not executable")
        print(f"zym: PID {os.getpid()} runs {command[0]} with zym's agent dormant; "
              f"record it with: sudo zym capture --pid {os.getpid()} --duration 30",
              file=sys.stderr)
        try:
            os.execvpe(command[0], command, env)
        except OSError as e:
            raise CaptureError(f"cannot run {command[0]!r}: {e.strerror}") from None


def register(app: typer.Typer) -> None:
    app.command("run", help=HELP, context_settings={"allow_interspersed_args": False})(run)
