"""`zym capture`: record every CUDA launch, copy, memset and sync of a Python process with the
exact Python line that made it (eBPF; needs root). Library: zym.capture.session."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .errors import exit_on_error

_HELP = """Capture the CUDA calls of a Python process with their Python stacks (eBPF, root).

Two sides, joined into one file. The CPU side (every CUDA launch, copy, memset and sync with its
exact Python line) needs root, BCC and the kernel headers (scripts/install-deps.sh). The GPU
side (kernels, copies, memsets and their GPU time) needs zym in the target: the `-- COMMAND`
form loads CUPTI at start-up; with --pid, the process must have been started by `zym run`
(a dormant agent that the capture switches on and off), else only the CPU side is recorded.
It needs a libcupti for the target's CUDA (torch's wheels ship one), and no torch.profiler in
the target (both want CUPTI). Without root, zym records the GPU side alone: the calls then
have no Python lines.

Example: sudo zym capture -o trace.parquet -- python serve.py --port 8000

Example: sudo zym capture --pid 1234 --duration 30 -o trace.parquet

Example: sudo zym capture --max-overhead 1% -o trace.parquet -- python serve.py

Example (continuous, one file a minute for `zym fleet ingest`): sudo zym capture --pid 1234 --rotate 60s --keep 60 --label service=decode -o /var/zym/decode.parquet
"""
# One line per paragraph: rich keeps the source's line breaks, so the help wraps to the terminal
HELP = "\n\n".join(" ".join(p.split()) for p in _HELP.split("\n\n"))


def capture(
    ctx: typer.Context,
    pid: Annotated[int | None, typer.Option(
        "--pid", help="Attach to this running Python process.")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Capture file to write (default zym-<pid|cmd>.parquet).")] = None,
    duration: Annotated[float | None, typer.Option(
        "--duration", help="Stop after this many seconds.")] = None,
    sample: Annotated[int, typer.Option(
        "--sample", min=1, help="Walk the Python stack of every Nth call per thread; every call "
                                "is still recorded.")] = 1,
    runtime_api: Annotated[bool, typer.Option(
        "--runtime-api", help="Also probe libcudart, to name calls after the runtime API "
                              "(cudaLaunchKernel...); costs two more traps per call.")] = False,
    max_overhead: Annotated[str | None, typer.Option(
        "--max-overhead", metavar="PCT", help="Budget mode: walk fewer Python stacks (sampled "
        "per thread) to keep the estimated overhead under PCT (e.g. 1%); every call and GPU "
        "op is still recorded.")] = None,
    return_probes: Annotated[bool, typer.Option(
        "--return-probes", help="Probe the return of syncs and blocking copies even when CUPTI "
                                "records their duration (one more trap per such call).")] = False,
    native: Annotated[bool, typer.Option(
        "--native/--no-native", help="Native frames and the torch operator layer: copy the "
        "thread's stack once per new native path (the same Python line reaching the API "
        "another way), unwound with the libraries' .eh_frame after the capture.")] = True,
    nvtx: Annotated[bool | None, typer.Option(
        "--nvtx/--no-nvtx", help="Record the program's NVTX ranges (torch.cuda.nvtx, emit_nvtx) "
        "as a stack layer and a Perfetto track: on for a program zym starts; a running process "
        "has them only when started by `zym run --nvtx`.", show_default=False)] = None,
    shapes: Annotated[bool, typer.Option(
        "--shapes", help="Record the input shapes of torch's matmuls, as torch.profiler's "
        "record_shapes does, for the rules that size matmuls (FLOPs, alignment). torch's "
        "matmul entry points are wrapped: microseconds per matmul call, for a diagnostic "
        "capture (ZYM_SHAPES_SCOPE=all: every operator, through a dispatch mode).")] = False,
    keep_raw: Annotated[bool, typer.Option(
        "--keep-raw", help="Keep the raw Arrow streams next to the output.")] = False,
    print_bpf: Annotated[bool, typer.Option(
        "--print-bpf", help="Print the BPF program with its -D flags and exit.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Overwrite OUTPUT if it exists.")] = False,
    rotate: Annotated[str | None, typer.Option(
        "--rotate", metavar="INTERVAL", help="Continuous capture: one file per INTERVAL (60s, "
        "5m, 1h), named OUTPUT-<start>-<n>.parquet, until the target exits or zym is stopped; "
        "each file with its calls' GPU work (a command zym starts, or --pid of a process "
        "started by `zym run`).")] = None,
    keep: Annotated[int | None, typer.Option(
        "--keep", min=1, help="With --rotate: keep only the newest N files.")] = None,
    label: Annotated[list[str] | None, typer.Option(
        "--label", "-l", help="With --rotate: a label for every file, KEY=VALUE (service=, "
                              "version=...); repeatable.")] = None,
    finalize: Annotated[Path | None, typer.Option(
        "--finalize", metavar="RAW_DIR", help="Write the capture file from a raw directory left "
                                              "by an interrupted or lean-host capture (no root "
                                              "needed).")] = None,
) -> None:
    with exit_on_error():
        if finalize is not None:
            _finalize(finalize, output, force)
            return
        if print_bpf:
            from zym.capture.bpf_loader import printable_program

            typer.echo(printable_program())
            return
        from zym.capture.cupti.integrate import capture_with_gpu  # GPU side (CUPTI)
        from zym.capture.session import CaptureConfig
        from zym.schemas.output import check_target

        command = list(ctx.args)
        if shapes and (pid is not None or rotate is not None or not command):
            from zym.schemas.errors import CaptureError

            raise CaptureError("--shapes records a program zym starts (zym capture --shapes -- "
                               "COMMAND), without --pid or --rotate: operators are seen from "
                               "inside the program, from its start (a service started with "
                               "`zym run --shapes` has them in every --pid capture)")
        if output is None:
            output = Path(f"zym-{pid if pid else Path(command[0]).name if command else 'capture'}.parquet")
        if rotate is not None or keep is not None or label:
            _rotate(rotate, keep, label, CaptureConfig(
                output=output, pid=pid, command=command or None, duration=duration,
                sample=sample, runtime_api=runtime_api, keep_raw=keep_raw,
                max_overhead_pct=_percent(max_overhead), native=native,
                nvtx=(pid is None) if nvtx is None else nvtx))
            return
        check_target(output, force)  # before the target runs, not after
        capture_with_gpu(CaptureConfig(output=output, pid=pid, command=command or None,
                                       duration=duration, sample=sample, runtime_api=runtime_api,
                                       keep_raw=keep_raw, force_return_probes=return_probes,
                                       max_overhead_pct=_percent(max_overhead), native=native,
                                       nvtx=(pid is None) if nvtx is None else nvtx,
                                       shapes=shapes))


def _rotate(rotate: str | None, keep: int | None, label: list[str] | None, cfg) -> None:
    """Continuous capture: the eBPF session with a rotating writer (capture/rotate.py)."""
    import dataclasses

    from zym.capture.cupti.integrate import capture_with_gpu
    from zym.capture.rotate import parse_interval
    from zym.schemas.errors import CaptureError

    if rotate is None:
        raise CaptureError("--keep and --label go with --rotate INTERVAL")
    labels = {}
    for item in label or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CaptureError(f"--label {item!r}: give KEY=VALUE")
        labels[key] = value
    summary = capture_with_gpu(dataclasses.replace(cfg, rotate_s=parse_interval(rotate),
                                                   keep=keep, labels=labels))
    typer.echo(f"zym: {summary.calls} calls in {summary.seconds:.1f} s -> "
               f"{len(summary.outputs)} files kept"
               + (f" (newest {summary.outputs[-1]})" if summary.outputs else ""), err=True)
    gpu = summary.gpu
    if gpu.get("gpu_ops"):
        pct = 100 * gpu["gpu_ns_with_stack"] / gpu["gpu_ns"] if gpu["gpu_ns"] else 0.0
        typer.echo(f"zym: GPU: {gpu['gpu_ops']} kernels/copies/memsets in the files written, "
                   f"{pct:.1f}% of their GPU time with its Python stack", err=True)


def _percent(text: str | None) -> float | None:
    """'1%', '1' or '0.5%' -> 1.0 / 0.5; bad input is a one-line error (exit 2)."""
    from zym.schemas.errors import CaptureError

    if text is None:
        return None
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise CaptureError(f"--max-overhead {text!r}: give a percentage, e.g. 1%") from None
    if not 0 < value < 100:
        raise CaptureError(f"--max-overhead {text!r}: give a percentage between 0 and 100")
    return value


def _finalize(raw_dir: Path, output: Path | None, force: bool) -> None:
    from zym.capture.finalize_raw import finalize_raw
    from zym.schemas.errors import CaptureError
    from zym.schemas.output import display

    if not any((raw_dir / f"calls.{ext}").exists() for ext in ("arrow", "jsonl")):
        raise CaptureError(f"{display(raw_dir)}: not a raw capture directory (no calls.arrow)")
    if output is None:
        output = raw_dir.with_name(raw_dir.name.removesuffix(".raw") or "capture.parquet")
    tables, meta = finalize_raw(raw_dir, output, force)
    lost = meta.dropped.get("raw_unverified_bytes")
    note = f" ({lost} bytes of an unfinished last batch left out)" if lost else ""
    typer.echo(f"zym: {tables['call'].height} calls -> {display(output)}{note}", err=True)
    if "gpu" in tables:  # GPU side (CUPTI) recorded beside the raw capture, joined
        from zym.capture.cupti.integrate import summary_line

        typer.echo(summary_line(output, meta), err=True)


def register(app: typer.Typer) -> None:
    app.command(
        "capture", help=HELP, options_metavar="[OPTIONS] [-- COMMAND [ARGS]...]",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(capture)
