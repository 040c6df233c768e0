"""The relations rules read: the analysis's facts (:mod:`zym.analysis.facts`) as tables, one
row per event, each joined with its call site.

A rule names one relation and filters, groups and measures its rows. Every relation is built
once per evaluation, only when a rule reads it, from the facts (the same calls, GPU operations,
busy periods, gaps and sites the call paths and outputs use: nothing is derived twice):

* ``calls``: one row per CUDA API call, with the copy or memset it caused, its copy direction
  and memory kinds, the torch op chain above it, its user call site, the enclosing Python call
  (or step) it ran in, and the GPU idle time it caused (syncs, blocking copies).
* ``gpu``: one row per GPU operation (kernel, copy, memset) whose launching call was captured,
  with that call's timing and site, the kernel's class, precision and tensor-core use
  (:mod:`zym.analysis.kernels`), torch op, input shapes/dtypes and, for matmul-family ops,
  the FLOPs it performed.
* ``gaps``: one row per GPU idle gap between two busy periods of a device, attributed to what
  the CPU was doing: waiting in a blocking call (``cause = "sync"``) or launching the work
  that ended the gap (``cause = "launch"``), with that call's site.
* ``paths``: one row per call path of the analysis (``zym analyze``'s rankings).
* ``steps``: one row per step of the window (a request, a batch, a decoding step:
  :mod:`zym.analysis.phases`), with its CPU and GPU time and its launches.
* ``stretches``: one row per stretch of a step's own CPU work with no CUDA call on its
  thread that the spans place in a function, and each step's longest.
* ``windows``: the window cut into equal slices, with each device's busy time in each.

``COLUMNS`` documents each relation's columns; rule validation rejects any other column.
The *site* of a call is the innermost stack node above its CUDA API frame (``site_id``): the
torch op invocation path, or the Python line for direct calls.
"""
from __future__ import annotations

import itertools
import json
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import polars as pl

from .concat import CONCAT_COLUMNS, CONCAT_OPS, with_append_factor
from .facts import EVENT_SITE_COLUMNS, conformed, per_name, take
from .load import constant_columns
from .matmul import MATMUL_COLUMNS, MATMUL_OPS, with_flops
from .trie import NONE, Trie

if TYPE_CHECKING:
    from .report import Analysis

SITE_DOC = {
    "stack_id": "leaf stack node of the event's CPU call",
    "code_site": "the code a finding points at: one id per user line + torch op chain + "
                 "built-in, whatever the callers above (the default grouping)",
    "site_id": "call path site: the innermost stack node above the CUDA API frame",
    "user_node": "stack node of the innermost user (non-framework) frame",
    "user_function": "innermost user frame: function",
    "user_file": "innermost user frame: file",
    "user_line": "innermost user frame: line (first line of the function for Kineto)",
    "user_module": "nn.Module class the user frame runs in, if any",
    "user_source": "source text of the user line, where the capture stored it",
    "mechanism": "the Python call that moves data or waits: .item(), .cpu(), .tolist(), "
                 "torch.cuda.synchronize()... (from the line's source text or built-ins)",
    "torch_op": "innermost torch op (aten::...) above the call",
    "op_chain": "every torch op above the call, outermost first, as ';op1;op2;'",
    "size_op": "the outermost torch op above the call whose output size depends on the values "
               "(aten::nonzero, aten::masked_select, aten::unique...: PyTorch reads the size "
               "back to the host); null where there is none",
    "frames": "every Python frame above the call, outermost first, as ';file:function;...;' "
              "(match a caller anywhere in the stack with a regex)",
    "py_api": "innermost Python built-in above the call: .tolist, .item, .cpu (Tensor methods "
              "start with a dot), linear...; null when the producer records no built-ins",
    "site": "the site as users read it: file:line function",
}
OP_DOC = {
    "op_id": "torch op invocation id (Kineto External id)",
    "op_shapes": "input shapes of the innermost torch op, JSON",
    "op_dtypes": "input dtypes of the innermost torch op, JSON",
    "dtype": "first input dtype of the innermost torch op (float, c10::Half, c10::BFloat16...)",
}
COLUMNS: dict[str, dict[str, str]] = {
    "calls": {
        "call_idx": "row number of the call in the analysis (time order)",
        "pid": "process id", "tid": "thread id", "ts_ns": "start", "dur_ns": "duration",
        "end_ns": "end", "correlation_id": "CUDA correlation id",
        "api": "CUDA API name (cudaMemcpyAsync, cudaStreamSynchronize...)",
        "kind": "launch, copy, memset, sync or other",
        "copy_kind": "copy direction: HtoD, DtoH, DtoD (from the API name or its GPU copy)",
        "src_mem": "copy source memory: pageable, pinned, device", "dst_mem": "copy destination",
        "bytes": "bytes copied or set",
        "gpu_ns": "GPU time of the copy or memset the call caused (kernel time: relation gpu)",
        "blocking": "the call blocks the CPU until the GPU catches up (syncs, synchronous or "
                    "pageable copies, synchronous memsets)",
        "blocked_ns": "duration when blocking, else 0",
        "memory": "the call gives memory to the driver or takes it back (cudaMalloc, cudaFree, "
                  "cudaHostAlloc, cuMemAllocAsync...: zym.schemas.apis.MEMORY_PATTERN)",
        "follows_dtoh": "the previous call on the thread was a device-to-host copy (calls "
                        "with no GPU work, wait or memory, such as event records, passed "
                        "over, except before an event sync; here and in the next four)",
        "follows_copy": "the previous call on the thread was a copy (any direction)",
        "prev_copy_bytes": "bytes of the previous call on the thread when it was a copy",
        "follows_dtoh_elsewhere": "the previous call on the thread was a device-to-host copy "
                                  "of another code site (a non-blocking copy, then a sync)",
        "prev_copy_site": "site (file:line function) of the previous call on the thread when "
                          "it was a copy",
        "call_instance": "the call of the site's function the call ran in: its Kineto span, "
                         "else the run of calls through the same caller line and function, "
                         "never across two steps (zym.analysis.instances)",
        "step": "index of the step the call ran in (null outside steps)",
        "gpu_idle_ns": "GPU idle time that began while the CPU was blocked in this call",
        "left_work_running": "a blocking call that returned while GPU work its process "
                             "launched before it was still running: it waited for part of "
                             "the queue (an event recorded before that work), not all of it "
                             "(zym.analysis.waits)",
        **SITE_DOC, **OP_DOC,
    },
    "gpu": {
        "gpu_idx": "row number of the operation in the analysis",
        "pid": "process id", "tid": "thread of the launching call", "device_id": "device",
        "stream_id": "stream", "ts_ns": "GPU start", "dur_ns": "GPU duration", "end_ns": "GPU end",
        "name": "kernel or activity name", "kind": "kernel, copy, memset or sync",
        "op_class": "what the kernel does, from its name: gemm, gemv, attention, conv, "
                    "elementwise, reduction, norm, softmax, index, copy, memset, sort, nccl, other",
        "precision": "math precision from the kernel name: fp64, fp32, tf32, fp16, bf16, fp8, "
                     "int8 (null when the name does not say)",
        "tensor_core": "the kernel runs on tensor cores (null when the name does not say)",
        "correlation_id": "CUDA correlation id", "bytes": "bytes copied or set",
        "copy_kind": "copy direction", "src_mem": "copy source memory",
        "dst_mem": "copy destination memory", "api": "launching CUDA API",
        "call_ts_ns": "launching call start", "call_dur_ns": "launching call duration",
        "call_idx": "row of the launching call (joins the calls relation)",
        "graph_id": "CUDA graph of a kernel replayed by a graph launch",
        "flops": "floating-point operations of a matmul-family op (null when unknown)",
        "dims_aligned8": "every matmul dimension of the op's inputs is a multiple of 8",
        "intensity": "matmul FLOPs per byte of its inputs and output (arithmetic intensity)",
        "append_factor": "a concatenation's (torch.cat) output elements over those of its "
                         "inputs but the largest: ~1,000 where a 1,024-long tensor gains one "
                         "position (zym.analysis.concat; null without recorded shapes)",
        "launch_wait_ns": "GPU idle gap this op ended, when the GPU was waiting for its launch",
        "step": "index of the step of the launching call",
        **SITE_DOC, **OP_DOC,
    },
    "attention": {
        "gpu_idx": "row number of the kernel in the analysis (joins the gpu relation)",
        "attention": "gpu_idx of its attention's softmax kernel (one attention: one value)",
        "role": "the kernel's part in attention written out by hand, softmax(q @ k^T * "
                "scale) @ v (zym.analysis.attention): scores (the first batched matmul), "
                "softmax, between (an element-wise or copy kernel between the two matmuls: "
                "scaling, a mask, the copy that makes v contiguous), input_copy (a copy that "
                "makes q or k contiguous for the first matmul), scale (q * scale right before "
                "it), output (the second matmul)",
        "pid": "process id", "tid": "thread of the launching call", "device_id": "device",
        "stream_id": "stream", "ts_ns": "GPU start", "dur_ns": "GPU duration", "end_ns": "GPU end",
        "name": "kernel name", "op_class": "what the kernel does (as the gpu relation's)",
        "precision": "math precision from the kernel name (as the gpu relation's)",
        "correlation_id": "CUDA correlation id", "api": "launching CUDA API",
        "call_ts_ns": "launching call start", "call_dur_ns": "launching call duration",
        "call_idx": "row of the launching call (joins the calls relation)",
        "step": "index of the step of the launching call",
        "fused_ns": "what its attention's fused kernel (F.scaled_dot_product_attention) would "
                    "take on the GPU: the two matmuls' time times what a fused kernel takes "
                    "over them at that time, in their math (analysis/attention_costs.yaml, "
                    "measured; the matmuls' time where their math is unknown)",
        **{k: v + " (of the attention's softmax: an attention's kernels share its site)"
           for k, v in SITE_DOC.items()},
    },
    "gaps": {
        "pid": "process id", "tid": "thread of the attributed call", "device_id": "device",
        "ts_ns": "gap start (device went idle)", "dur_ns": "gap length", "end_ns": "gap end",
        "cause": "sync (CPU blocked in a call when the GPU went idle) or launch",
        "api": "attributed CUDA call", "correlation_id": "attributed call's correlation id",
        "call_idx": "attributed call (joins the calls relation)",
        "call_ts_ns": "attributed call start", "op_id": "attributed call's torch op id",
        "in_op_ns": "launch gaps: part of the gap the CPU spent inside the torch op whose launch "
                    "ended it (from its span; null without spans)",
        "step": "index of the step of the attributed call",
        **SITE_DOC,
    },
    "paths": {
        "path_id": "call path (its leaf stack node, as in zym analyze)",
        "calls": "CUDA calls on the path", "launches": "kernel launches", "syncs": "sync calls",
        "cpu_call_ns": "CPU time in the path's CUDA calls",
        "cpu_blocked_ns": "CPU time blocked in syncs and blocking copies",
        "max_blocked_ns": "longest single blocking call", "api": "first CUDA API of the path",
        "gpu_ns": "GPU time caused", "kernels": "kernels", "copies": "copies", "memsets": "memsets",
        "bytes_htod": "bytes copied host to device", "bytes_dtoh": "bytes copied device to host",
        "bytes_dtod": "bytes copied device to device", "top_gpu_op": "costliest GPU op name",
        **SITE_DOC,
    },
    "steps": {
        "step": "step index (0-based, in the window)", "pid": "process id",
        "tid": "thread id", "ts_ns": "step start", "dur_ns": "step length", "end_ns": "step end",
        "function": "the step function (file function)",
        "launches": "kernel launches in the step", "calls": "CUDA calls in the step",
        "launch_from": "what the step function called that launched most of the step's "
                       "kernels (file:line function, a module or a built-in; the step "
                       "function's own ops: 'FUNCTION itself'); null without its frames",
        "launch_from_share": "launch_from's share of the step's launches",
        "launch_from_callee": "the user's function launch_from called that launched most of "
                              "launch_from's kernels in the step (file:line function)",
        "launch_from_calls": "how many times launch_from_callee was called in the step, where "
                             "twice or more (a loop over items: one call on them all launches "
                             "its kernels once); null where once, or without Python spans",
        "launch_next": "the next source of the step's launches after launch_from",
        "launch_next_share": "launch_next's share of the step's launches",
        "syncs": "sync calls in the step", "blocked_ns": "CPU time blocked in the step",
        "size_syncs": "sync calls in the step under a torch op whose output size depends on "
                      "the values (size_op): the step's shapes change with its data",
        "cpu_call_ns": "CPU time inside CUDA calls in the step",
        "gpu_ns": "GPU time of the work the step launched",
        "busy_ns": "time the GPU was busy during the step",
        "busy_frac": "busy_ns / dur_ns",
        "quiet_ns": "the step's longest stretch without a CUDA call on its thread (Python, "
                    "data preparation, an op planning before its launch: what graphs do not "
                    "shorten)",
        "quiet_frac": "quiet_ns / dur_ns",
        "quiet_idx": "the call that ended the step's longest stretch without a CUDA call that "
                     "its own work fills: before or between its calls, or after its last one up "
                     "to where the step function returned, where steps are found from spans "
                     "(the time after that return also holds any wait for the next step); "
                     "also after its last call where a step starts at a line (eBPF stacks, "
                     "profiler steps: its work before its first call falls there); for a "
                     "stretch after the last call, the next call on the thread (the CPU time "
                     "before it holds that work); joins the calls relation, null where no "
                     "call follows in the window",
        "quiet_py_ns": "that stretch's time before the torch op whose CUDA call ended it began "
                       "(the step's own CPU work, not that op planning or compiling before its "
                       "launch), from the spans (Kineto); without spans, the whole stretch",
        "quiet_until": "the site (file:line function) of the call that ended that stretch: "
                       "the work ran before it (null where the step function's return "
                       "ended it: its work after its last call, from the spans)",
        "quiet_where": "where that time went, from the spans (Kineto): the site (file:line "
                       "function) of the innermost span, outside torch ops, on the step's "
                       "thread, that covers half of it or more; null without spans, or for "
                       "under 100 µs of work",
        "torch_ops": "torch op spans that start in the step, any thread (Kineto; 0 without "
                     "spans)",
        "grad_ops": "those autograd recorded (a sequence number: grad mode was on)",
        "backward_ops": "those of a backward pass (the autograd engine's, a ...Backward "
                        "node's): a training step",
        "grad_cpu_ns": "what autograd's recording cost the step's CPU: grad_ops times "
                       "zym.analysis.training.AUTOGRAD_NS_PER_OP (measured, not read)",
        "train_kernels": "kernels the step launched that modules run only in training mode "
                         "(dropout: a dropout op above the kernel, or a dropout kernel's name "
                         "where no op is known; batch norm's batch statistics and counter, "
                         "cuDNN's training batch norm): a model not put in eval mode",
        "train_gpu_ns": "their GPU time",
    },
    "items": {
        "item": "row number (by step, then function)",
        "step": "index of its step (joins the steps relation)", "pid": "process id",
        "tid": "thread id of the steps", "function": "the step function (file function)",
        "ts_ns": "its step's start", "dur_ns": "its step's length", "end_ns": "its step's end",
        "item_function": "a function the step calls once per item (file:line function), 4 "
                         "times or more from one line: what the step function called that "
                         "launched most of the step's kernels, or the user function below it "
                         "that did, and so on down; then the same among the launches outside "
                         "the functions found, past those called too few times, up to 4 a step "
                         "(a Python function; calls from the spans, else from the stacks' runs "
                         "of calls; where such a run is a loop inside one call of the function, "
                         "with code after it, the loop: 'the loop at file:first-last in "
                         "function', its iterations its calls)",
        "item_calls": "item_function's calls in the step",
        "item_launches": "kernel launches inside item_function's calls in the step, and of the "
                         "step function's own ops that come the same number of times before "
                         "each call (the loop body's, its uploads too: with spans)",
        "item_span_ns": "from item_function's first CUDA call in the step (or its loop body "
                        "op's) to the end of its last",
        "busy_ns": "time the GPU was busy during its step",
        "gpu_ns": "GPU time of the work its step launched",
    },
    "stretches": {
        "stretch": "row number of the stretch (time order)",
        "step": "index of its step (joins the steps relation)", "pid": "process id",
        "tid": "thread id of the steps", "function": "the step function (file function)",
        "ts_ns": "stretch start", "dur_ns": "stretch length", "end_ns": "stretch end",
        "longest": "the longest stretch of its step's own work (the steps relation's "
                   "quiet_idx, quiet_py_ns...)",
        "quiet_idx": "the call that ended the stretch, as the steps relation's (a stretch "
                     "after the step's last call: the next call on the thread); joins the "
                     "calls relation, null where no call follows in the window",
        "quiet_py_ns": "the stretch's time before the torch op whose CUDA call ended it began "
                       "(the step's own CPU work), as the steps relation's",
        "quiet_bare_ns": "quiet_py_ns less what recording the capture cost in it (the CPU "
                         "time the recording added before quiet_idx: torch.profiler's cost "
                         "of its events, a zym capture's per call; 0 at least)",
        "quiet_until": "the site (file:line function) of the call that ended it (null where "
                       "the step function's return did)",
        "quiet_where": "where its time went, as the steps relation's (the innermost span "
                       "outside torch ops on the steps' thread that covers half of it or more)",
        "step_ns": "its step's length",
        "gpu_busy_ns": "time the GPU (any device) was busy during the stretch",
        "steps": "the window's steps (every row: one step function)",
        "steps_ns": "their time, all together",
        "steps_bare_ns": "steps_ns without what recording the capture cost: scaled as the "
                         "unfixed replay without it shortens the window (steps_ns where "
                         "nothing is replayed)",
        "steps_busy_ns": "time the GPU was busy in them",
        "steps_gpu_ns": "GPU time of the work they launched",
    },
    "windows": {
        "device_id": "device", "ts_ns": "window start", "dur_ns": "window length",
        "end_ns": "window end", "busy_ns": "device busy time in the window",
        "busy_frac": "busy_ns / dur_ns", "window_index": "0-based window number",
    },
}
RELATIONS = tuple(COLUMNS)
WINDOWS = 50  # the `windows` relation cuts the capture into this many windows
# A step's CPU work shorter than this is not placed in a function (``quiet_where`` null): the
# spans long enough to cover half of shorter work are most of a thread's.
WHERE_MIN_NS = 100_000
# A stretch of a step's own work is a row of the stretches relation if it is the step's
# longest, a phase of the step (this share of it or more: placed in a function by the spans
# or not), or placed (``quiet_where``) and spent in a function that makes no CUDA call.
STRETCH_MIN_SHARE = 0.1

# Standard measures every rule on a relation gets in its evidence (rules may add their own).
# ``cost_ns`` is the observed cost (what findings show beside the saving) unless a rule names
# another measure.
STANDARD_MEASURES: dict[str, dict[str, pl.Expr]] = {
    "calls": {"count": pl.len(), "stall_ns": pl.col("blocked_ns").sum(),
              "worst_stall_ns": pl.col("blocked_ns").max(),
              # null without a GPU side (a sum of nulls would say 0 ns)
              "gpu_idle_ns": pl.when(pl.col("gpu_idle_ns").is_not_null().any())
              .then(pl.col("gpu_idle_ns").sum()), "bytes": pl.col("bytes").sum(),
              "gpu_ns": pl.col("gpu_ns").sum(),
              "instances": pl.col("call_instance").n_unique()},
    "gpu": {"count": pl.len(), "gpu_ns": pl.col("dur_ns").sum(),
            "worst_ns": pl.col("dur_ns").max(), "bytes": pl.col("bytes").sum(),
            "flops": pl.col("flops").sum(),
            "flop_gpu_ns": pl.col("dur_ns").filter(pl.col("flops").is_not_null()).sum(),
            "launch_ns": pl.col("call_dur_ns").sum(),
            "launch_wait_ns": pl.col("launch_wait_ns").sum()},
    "attention": {"count": pl.len(), "gpu_ns": pl.col("dur_ns").sum(),
                  "worst_ns": pl.col("dur_ns").max(), "launch_ns": pl.col("call_dur_ns").sum(),
                  "attentions": pl.col("attention").n_unique()},
    "gaps": {"count": pl.len(), "idle_ns": pl.col("dur_ns").sum(),
             "worst_idle_ns": pl.col("dur_ns").max()},
    "paths": {"count": pl.len(), "gpu_ns": pl.col("gpu_ns").sum(),
              "stall_ns": pl.col("cpu_blocked_ns").sum(),
              "worst_stall_ns": pl.col("max_blocked_ns").max(),
              "calls": pl.col("calls").sum(), "kernels": pl.col("kernels").sum()},
    "steps": {"count": pl.len(), "span_ns": pl.col("dur_ns").sum(),
              "busy_ns": pl.col("busy_ns").sum(), "launches": pl.col("launches").sum(),
              "gpu_ns": pl.col("gpu_ns").sum(), "stall_ns": pl.col("blocked_ns").sum()},
    "items": {"count": pl.len(), "span_ns": pl.col("dur_ns").sum(),
              "busy_ns": pl.col("busy_ns").sum(), "gpu_ns": pl.col("gpu_ns").sum()},
    "stretches": {"count": pl.len(), "work_ns": pl.col("quiet_py_ns").sum(),
                  "in_steps": pl.col("step").n_unique(), "steps": pl.col("steps").max(),
                  "span_ns": pl.col("steps_ns").max(), "busy_ns": pl.col("steps_busy_ns").max(),
                  "work_bare_ns": pl.col("quiet_bare_ns").sum(),
                  "span_bare_ns": pl.col("steps_bare_ns").max(),
                  "while_ns": pl.col("dur_ns").sum(), "while_busy_ns": pl.col("gpu_busy_ns").sum(),
                  "gpu_ns": pl.col("steps_gpu_ns").max()},
    "windows": {"count": pl.len(), "span_ns": pl.col("dur_ns").sum(),
                "busy_ns": pl.col("busy_ns").sum()},
}
# Calls columns that read each call's previous call on its thread (built before rows are kept).
SEQUENCE_COLUMNS = ("follows_dtoh", "follows_copy", "prev_copy_bytes",
                    "follows_dtoh_elsewhere", "prev_copy_site")
# Occurrence columns (pid, tid, ts_ns, dur_ns, correlation_id) of each relation's rows.
_NULL = pl.lit(None, pl.Int64)
OCCURRENCE: dict[str, list[pl.Expr]] = {
    "calls": [pl.col("pid"), pl.col("tid"), pl.col("ts_ns"), pl.col("dur_ns"),
              pl.col("correlation_id")],
    "gpu": [pl.col("pid"), pl.col("tid"), pl.col("call_ts_ns").alias("ts_ns"),
            pl.col("call_dur_ns").alias("dur_ns"), pl.col("correlation_id")],
    "attention": [pl.col("pid"), pl.col("tid"), pl.col("call_ts_ns").alias("ts_ns"),
                  pl.col("call_dur_ns").alias("dur_ns"), pl.col("correlation_id")],
    "gaps": [pl.col("pid"), pl.col("tid"), pl.col("ts_ns"), pl.col("dur_ns"),
             pl.col("correlation_id")],
    # A path is not an event: its findings list none (the calls relation has them).
    "paths": [_NULL.alias(c) for c in ("pid", "tid", "ts_ns", "dur_ns", "correlation_id")],
    "steps": [pl.col("pid"), pl.col("tid"), pl.col("ts_ns"), pl.col("dur_ns"),
              _NULL.alias("correlation_id")],
    "items": [pl.col("pid"), pl.col("tid"), pl.col("ts_ns"), pl.col("dur_ns"),
              _NULL.alias("correlation_id")],
    "stretches": [pl.col("pid"), pl.col("tid"), pl.col("ts_ns"), pl.col("dur_ns"),
                  _NULL.alias("correlation_id")],
    "windows": [_NULL.alias("pid"), _NULL.alias("tid"), pl.col("ts_ns"), pl.col("dur_ns"),
                _NULL.alias("correlation_id")],
}
# The row key of each relation: what a fix model is applied to (see zym.rules.savings).
ROW_KEY = {"calls": "call_idx", "gpu": "gpu_idx", "attention": "gpu_idx", "gaps": "gap_idx",
           "paths": "path_id", "steps": "step", "items": "item", "stretches": "stretch",
           "windows": "window_index"}

# Columns that are a function of the call stack: rules filter them on the (small) site table
# and match events by stack id; they are joined onto events only where a rule groups by them.
SITE_COLUMNS = ("code_site", "site_id", "user_node", "user_function", "user_file", "user_line",
                "user_module", "user_source", "mechanism", "torch_op", "op_chain", "size_op",
                "py_api",
                "frames", "site")


class Relations:
    """Builds the relations of one analysis, each once and only with the columns rules read.

    Event-level work is vectorized: a call's GPU work, a GPU op's launching call and a stack's
    site come from the facts' gathers, never from a Python loop over events.
    """

    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self.facts = analysis.facts
        self._eager: dict[str, pl.DataFrame] = {}
        self._objects: dict[str, object] = {}
        self.total_gpu_ns = self.facts.gpu_ns
        self.window_ns = self.facts.window_ns
        self._site_frames = False

    @property
    def sites(self) -> pl.DataFrame:
        """The site table rules filter and label with; its ``frames`` column (every Python
        frame above each site, as text: ~0.2 GB at 400 k stack nodes) once a rule names it
        (:meth:`reading_sites`)."""
        return self.facts.sites_with_frames if self._site_frames else self.facts.sites

    def reading_sites(self, columns: set[str]) -> None:
        """Told which site columns the rules about to run name."""
        self._site_frames = self._site_frames or "frames" in columns

    @property
    def instance_source(self) -> str:
        """How ``call_instance`` was found: ``spans`` (Kineto: exact calls of the user
        function) or ``stacks`` (runs of calls through the same caller line and function,
        split at steps: :mod:`zym.analysis.instances`)."""
        spans = self.analysis.data.span_table
        return "spans" if spans is not None and spans.height else "stacks"

    def instance_label(self) -> str:
        return self.instance_source

    def instance_plural(self) -> str:
        return "calls of the enclosing function"

    def materialize(self, name: str, columns: set[str], wheres: list[dict] | None = None
                    ) -> pl.DataFrame:
        """The relation with (at least) ``columns``, built once per column set.

        ``wheres``: the ``where`` of every rule that will read it; rows none of them can keep
        are dropped before the per-row joins and gathers (``compile.relaxed_where``).
        """
        key = self._key(name, wheres)
        have = self._eager.get(key)
        if have is not None and columns <= set(have.columns):
            return have
        wanted = (columns | set(have.columns)) if have is not None else set(columns)
        wanted &= set(COLUMNS[name]) | {"call_idx", ROW_KEY[name]}
        # a column with one value in every row (no matmul shapes: no FLOPs) is held once
        self._eager[key] = constant_columns(getattr(self, f"_build_{name}")(wanted, wheres))
        return self._eager[key]

    @staticmethod
    def _key(name: str, wheres: list[dict] | None) -> str:
        return f"rel:{name}:{json.dumps(wheres, sort_keys=True, default=str)}"

    def forget(self, name: str, wheres: list[dict] | None = None) -> None:
        """Drop the frame :meth:`materialize` keeps for ``name`` and ``wheres`` (built again
        if asked): the rule engine's, once its queries have run (the plans of rules that fired
        hold what they read)."""
        self._eager.pop(self._key(name, wheres), None)

    def _keep(self, df: pl.DataFrame, wheres: list[dict] | None,
              rows: pl.Series | None = None) -> pl.DataFrame:
        """Rows of ``df`` that at least one of ``wheres`` may keep (and, where given, that
        ``rows`` keeps: a mask), in one filter: each column kept is copied once."""
        from zym.rules.compile import relaxed_where

        sites = self.sites if "stack_id" in df.columns else None
        parts = [relaxed_where(w, set(df.columns), sites, df) for w in wheres or ()]
        cond = pl.any_horizontal(parts) if parts and all(p is not None for p in parts) else None
        if rows is not None:
            cond = pl.lit(rows) if cond is None else pl.lit(rows) & cond
        return df if cond is None else df.filter(cond)

    def _matmul_columns(self, call_idx: pl.Series) -> list[pl.Series | pl.Expr]:
        """:data:`MATMUL_COLUMNS` of the calls ``call_idx`` (null where a call is no matmul,
        or null): constants where the capture has no matmul with shapes."""
        return self._op_columns(self._matmuls(), MATMUL_COLUMNS, call_idx)

    def _concat_columns(self, call_idx: pl.Series) -> list[pl.Series | pl.Expr]:
        """:data:`CONCAT_COLUMNS` of the calls ``call_idx`` (null where a call is no
        concatenation, or null): constants where the capture has none with shapes."""
        return self._op_columns(self._shaped_calls(CONCAT_OPS, with_append_factor,
                                                   CONCAT_COLUMNS), CONCAT_COLUMNS, call_idx)

    def _op_columns(self, facts: pl.DataFrame, columns: tuple[str, ...], call_idx: pl.Series
                    ) -> list[pl.Series | pl.Expr]:
        """``columns`` of ``facts`` (one row per call, ``call_idx``) for the calls
        ``call_idx``, null for the others; constants where ``facts`` is empty."""
        if facts.height == 0:
            return [pl.lit(None, facts.schema[c]).alias(c) for c in columns]
        pos = pl.repeat(None, self.calls_table().height, dtype=pl.Int64, eager=True).scatter(
            facts["call_idx"], pl.int_range(facts.height, eager=True).cast(pl.Int64))
        at = pos.gather(call_idx)
        return [facts[c].gather(at) for c in columns]

    def get(self, name: str) -> pl.DataFrame:
        """A whole relation with its site columns joined (for inspection and tests)."""
        df = self.materialize(name, set(COLUMNS[name]))
        if "stack_id" in df.columns:
            df = df.join(self.facts.sites_with_frames.drop(*EVENT_SITE_COLUMNS), on="stack_id",
                         how="left")
        return df

    def _once(self, name: str, build) -> pl.DataFrame:
        if name not in self._eager:
            self._eager[name] = build()
        return self._eager[name]

    # -- shared pieces (from the facts) ---------------------------------------------------------

    def calls_table(self) -> pl.DataFrame:
        return self.facts.calls

    def gpu_table(self) -> pl.DataFrame:
        return self.facts.gpu

    def site_of(self, stack: pl.Series, columns: tuple[str, ...] = EVENT_SITE_COLUMNS
                ) -> list[pl.Series]:
        return self.facts.site_of(stack, columns)

    def _matmuls(self) -> pl.DataFrame:
        """FLOPs, arithmetic intensity and 8-alignment per matmul-family call (``call_idx``)."""
        return self._shaped_calls(MATMUL_OPS, with_flops, MATMUL_COLUMNS)

    def _shaped_calls(self, ops: tuple[str, ...], facts, columns: tuple[str, ...]
                      ) -> pl.DataFrame:
        """``facts`` (a function of the calls' ``op_shapes``, ``op_dtypes``, ``torch_op``)
        of the calls of ``ops`` whose shapes were recorded: ``call_idx`` and ``columns``."""
        stacks = self.sites.filter(pl.col("torch_op").is_in(list(ops)))["stack_id"]
        raw = conformed(self.analysis.data, "call")
        calls = self.calls_table().filter(pl.col("stack_id").is_in(stacks.implode()))
        calls = (calls.select("call_idx", "stack_id", *[raw[c].gather(calls["_orig"])
                                                        for c in ("op_shapes", "op_dtypes")])
                 .filter(pl.col("op_shapes").is_not_null())
                 .join(self.sites.select("stack_id", "torch_op"), on="stack_id", how="left"))
        return facts(calls).select("call_idx", *columns)

    def call_steps(self) -> pl.Series:
        """Per call (``call_idx``), the step of the window it ran in, or null."""
        return self._once("call_steps", self._call_steps).to_series()

    def _call_steps(self) -> pl.DataFrame:
        calls = self.calls_table()
        steps = self.analysis.steps_in_window()
        if steps is None:
            return pl.DataFrame({"step": pl.repeat(None, calls.height, dtype=pl.Int32,
                                                   eager=True)})
        from .timeline import interval_of

        k = interval_of(calls["ts_ns"].to_numpy(), steps.start_ns, steps.end_ns)
        ok = (k >= 0) & (calls["_thread"].to_numpy() == steps.thread)
        return pl.DataFrame({"step": pl.Series(np.where(ok, k, -1)).cast(pl.Int32)}).select(
            pl.when(pl.col("step") >= 0).then(pl.col("step")).alias("step"))

    # -- relations ----------------------------------------------------------------------------

    def _build_calls(self, want: set[str], wheres: list[dict] | None = None) -> pl.DataFrame:
        calls = self.calls_table()
        n = calls.height
        base = ("call_idx", "stack_id", "kind", "copy_kind", "bytes", "src_mem", "dst_mem",
                "blocking", "own_row")
        cols = [c for c in calls.columns if c in want or c in base]
        df = calls.select(cols).with_columns(pl.col("copy_kind").cast(pl.Categorical),
                                             pl.col("src_mem").cast(pl.Categorical),
                                             pl.col("dst_mem").cast(pl.Categorical))
        if "memory" in want:
            from zym.schemas.apis import is_memory_api

            df = df.with_columns(per_name(calls["api"], is_memory_api).fill_null(False)
                                 .alias("memory"))
        # Sequence columns need every call of the thread, before any row is dropped.
        if want & set(SEQUENCE_COLUMNS):
            prev = self._previous_on_thread()
            is_copy = (df["kind"] == "copy").gather(prev).fill_null(False)
            dtoh = is_copy & (df["copy_kind"] == "DtoH").gather(prev).fill_null(False)
            nbytes = df["bytes"].gather(prev)
            df = df.with_columns(dtoh.alias("follows_dtoh"), is_copy.alias("follows_copy"),
                                 pl.when(is_copy).then(nbytes).alias("prev_copy_bytes"))
            if "follows_dtoh_elsewhere" in want:
                df = df.with_columns(self._dtoh_elsewhere(df["stack_id"], prev, dtoh))
        if "step" in want:
            df = df.with_columns(self.call_steps())
        stack = df["stack_id"]
        df = self._keep(df, wheres)
        if "left_work_running" in want:  # (after the rows no rule keeps are dropped)
            from .waits import left_work_running

            rows = df["call_idx"].to_numpy()
            blocks = calls["blocking"].fill_null(False).to_numpy()[rows]
            left = np.zeros(len(rows), bool)
            left[blocks] = left_work_running(calls, self.facts.gpu, rows[blocks])
            df = df.with_columns(pl.Series("left_work_running", left))
        if "prev_copy_site" in want:   # after the rows no rule keeps are dropped
            df = df.with_columns(self._prev_copy_site(df["call_idx"], stack, prev, is_copy))
        if "call_instance" in want:
            df = df.with_columns(self._instances(df["call_idx"]))
        df = df.with_columns(*self.site_of(df["stack_id"]),
                             pl.col("bytes").fill_null(0),
                             self.gpu_table()["dur_ns"].gather(df["own_row"]).fill_null(0)
                             .alias("gpu_ns"))
        if "blocked_ns" in want:
            df = df.with_columns(pl.when("blocking").then(pl.col("dur_ns")).otherwise(0)
                                 .alias("blocked_ns") if "dur_ns" in df.columns else
                                 pl.when("blocking").then(calls["dur_ns"].gather(df["call_idx"]))
                                 .otherwise(0).alias("blocked_ns"))
        if "gpu_idle_ns" in want:
            idle = (self.facts.gaps.filter(pl.col("block_idx").is_not_null())
                    .group_by("block_idx").agg(pl.col("dur_ns").sum()))
            per_call = pl.repeat(0, n, dtype=pl.Int64, eager=True).scatter(
                idle["block_idx"], idle["dur_ns"])
            if self.analysis.data.gpu.height == 0:  # no GPU side: idle time is unknown
                per_call = pl.repeat(None, n, dtype=pl.Int64, eager=True)
            df = df.with_columns(per_call.gather(df["call_idx"]).alias("gpu_idle_ns"))
        self._objects.pop("thread order", None)  # (read by this build only)
        return df.select([c for c in df.columns if c in want or c in ("call_idx",)])

    def _thread_order(self, keep: bool) -> np.ndarray:
        """The calls per thread, in time order (:func:`zym.analysis.instances.thread_order`):
        one sort for the previous call on each thread and the calls' instances (``keep``:
        held for the instances of the same build, which drops it at its end)."""
        from .instances import thread_order

        order = self._objects.get("thread order")
        if order is None:
            order = thread_order(self.calls_table()["_thread"].to_numpy())
            if keep:
                self._objects["thread order"] = order
        return order

    def _dtoh_elsewhere(self, stack: pl.Series, prev: pl.Series, dtoh: pl.Series) -> pl.Series:
        """``follows_dtoh_elsewhere`` of every call (``stack``: the calls' stacks; ``prev``:
        each call's previous call on its thread): it follows a device-to-host copy of another
        ``code_site`` (the rules' default group: the copy's finding is not the sync's)."""
        at = np.flatnonzero(dtoh.to_numpy())   # only the calls that follow such a copy
        here = self.site_of(stack.gather(at), ("code_site",))[0]
        there = self.site_of(stack.gather(prev.gather(at)), ("code_site",))[0]
        moved = np.zeros(stack.len(), bool)
        moved[at] = here.ne_missing(there).to_numpy()
        return pl.Series("follows_dtoh_elsewhere", moved)

    def _prev_copy_site(self, call_idx: pl.Series, stack: pl.Series, prev: pl.Series,
                        is_copy: pl.Series) -> pl.Series:
        """``prev_copy_site`` of the calls ``call_idx`` (rows of ``stack``, ``prev`` and
        ``is_copy``, which cover every call), as categories: each call's previous copy's code
        site (an integer) read through a table of the labels (at 10 M GPU operations, text
        for every call kept cost ~140 MB of peak)."""
        before = prev.gather(call_idx).set(~is_copy.gather(call_idx), None)
        code = self.site_of(stack.gather(before), ("code_site",))[0]
        return self._code_site_labels.gather(code).alias("prev_copy_site")

    @cached_property
    def _code_site_labels(self) -> pl.Series:
        """Per code site (its value, a dense rank from 1, indexes this), its label (``site``:
        the code site determines it) as a category; null at 0."""
        labels = self.sites.select("code_site", "site").unique("code_site")
        top = int(labels["code_site"].max() or 0)
        return (pl.DataFrame({"code_site": pl.int_range(0, top + 1, eager=True)})
                .join(labels.with_columns(pl.col("code_site").cast(pl.Int64)), on="code_site",
                      how="left", maintain_order="left")["site"].cast(pl.Categorical))

    def _previous_on_thread(self) -> pl.Series:
        """Each call's previous call on its thread, by ``call_idx`` (null: none), among the
        calls that do GPU work, wait or manage memory: bookkeeping calls between a copy and
        the stream or device sync that waits for it (the host allocator's ``cudaEventRecord``
        after a copy into pinned memory, ``cudaStreamIsCapturing``, event queries) are passed
        over. Not for an event sync: it waits for its event, which an event record right
        before it may say is not the copy's (a copy, an event recorded, then a wait on the
        previous step's event: the wait moved a step later, as the sync rules advise)."""
        from zym.schemas.apis import is_memory_api
        from zym.schemas.lookup import null_where_negative

        from .instances import previous_on_thread
        from .waits import sync_rows

        calls = self.calls_table()
        counts = ((calls["kind"] != "other").fill_null(False) | calls["blocking"].fill_null(False)
                  | per_name(calls["api"], is_memory_api).fill_null(False)).to_numpy()
        thread = calls["_thread"].to_numpy()
        order = (self._thread_order(True) if self.facts.many_threads
                 else np.arange(calls.height, dtype=np.int64))
        prev = previous_on_thread(thread, order, counts)
        events = sync_rows(calls)[0]
        if len(events):
            prev[events] = previous_on_thread(thread, order)[events]
        return null_where_negative(prev, "p")

    def every_call_instance(self) -> np.ndarray:
        """Every call's ``call_instance``, by ``call_idx``: the calls relation's column for
        each call, without building the relation's other columns."""
        return self._instances(self.calls_table()["call_idx"]).to_numpy()

    def _instances(self, idx: pl.Series) -> pl.Series:
        """``call_instance`` of the calls ``idx`` (see ``COLUMNS``): with spans (Kineto), the
        start of the user frame's span around the call; else the call of the user function the
        call ran in, from the stacks (:mod:`zym.analysis.instances`). An outer frame's calls
        (the items of a loop): :meth:`_frame_instances`."""
        import numpy as np

        from .instances import Ancestors, call_instances, instance_columns

        calls = self.calls_table()
        spans = self.analysis.data.span_table
        if spans is None or spans.height == 0:
            # Every call's, once per analysis: a call's instance does not depend on which
            # others are asked for, and each ask passes over every call (rules ask for a
            # subset, the batching fixes for every call).
            def every() -> np.ndarray:
                anc = self._once_obj("ancestors", lambda: Ancestors(self.facts.nodes))
                user_node = self.site_of(calls["stack_id"], ("user_node",))[0]
                return call_instances(calls, user_node, np.arange(calls.height), anc,
                                      self.call_steps(), self._thread_order(False))

            ids = self._once_obj("call_instance of every call", every)
            at = idx.to_numpy()
            if _every_row(at, len(ids)):  # every call in order: shared, no copy
                return pl.Series("call_instance", ids, dtype=pl.Int64)
            return pl.Series("call_instance", ids[at], dtype=pl.Int64)

        user_node = self.site_of(calls["stack_id"], ("user_node",))[0]
        # a call's thread as one key (``_thread``), its user frame's node (the spans' type)
        frame = calls.select("_thread", "ts_ns").with_columns(
            user_node.cast(pl.Int64).alias("user_node"))
        if not _every_row(idx.to_numpy(), calls.height):
            frame = frame[idx]
        users = frame["user_node"].drop_nulls().unique()
        # The spans of those user frames (read a part at a time), and each call's latest one
        # before it.
        held = self.analysis.user_spans  # kept from the spans' checking pass
        if held is not None:
            sp = held.filter(pl.col("user_node").is_in(users.cast(pl.Int64).implode()))
            if spans.window is not None:  # the spans of the window (``SpanTable.lazy``'s)
                t0, t1 = spans.window
                sp = sp.filter((pl.col("inst_ts") < t1) & (pl.col("inst_end") > t0))
        else:
            sp = spans.collect(spans.lazy().filter(pl.col("stack_id").is_in(users.implode()))
                               .select(instance_columns()))
        return _span_starts(frame, sp)

    def _frame_instances(self, idx: pl.Series, node: pl.Series, below: np.ndarray
                         ) -> tuple[pl.Series, np.ndarray, np.ndarray]:
        """:meth:`_instances` of the calls ``idx`` (one thread's, in time order) in the
        frames ``node`` (a stack node per call; null: none, the call its own instance): the
        start of that frame's span around each call (spans), else the run of calls through
        that frame from its caller's line (stacks: :func:`zym.analysis.instances
        .call_instances`), split where the frame's executing line goes back to the first
        line its function issues CUDA work from (calls of it back to back, a list
        comprehension's: as :mod:`zym.analysis.phases` finds a step function's calls), and
        where the run repeats one sequence of stacks :data:`ITEM_MIN_CALLS` times or more
        (:func:`zym.analysis.instances.split_periodic`: calls of it whose every CUDA call
        comes from one of its lines), unless every call of the run is inside one function
        called from one line ``below`` it (the item search's next frame under each call, as
        :func:`~zym.analysis.instances.frame_codes` codes it, or -1: a function looping over
        its items' calls of another repeats as those calls do), or of a frame not the user's
        own (:data:`WHOLE`: torch's module wrapper around a model's identical layers).

        With the instances, per call: whether it comes after a loop inside one call of the
        function (:func:`_loop_tails`: the run, split where its line went back, ends with
        CUDA calls from lines none of its other parts has: the pieces were the iterations of
        a loop in one call, and these its code after the loop), and the frame's executing
        line (-1 with spans)."""
        from .instances import Ancestors, call_instances, instance_columns, split_periodic

        calls = self.calls_table()
        at = idx.to_numpy()
        spans = self.analysis.data.span_table
        if spans is None or spans.height == 0:
            anc = self._once_obj("ancestors", lambda: Ancestors(self.facts.nodes))
            full = pl.Series(np.full(calls.height, -1, np.int64)).scatter(
                at, node.cast(pl.Int64).fill_null(-1))   # -1: no frame (no stack node)
            ids = call_instances(calls, full, at, anc, self.call_steps(),
                                 self._thread_order(False))
            rows = anc.rows(node)
            line = np.where(rows >= 0, anc.statement_lines[np.maximum(rows, 0)], -1)
            pieces = _split_at_first_line(ids, anc, rows, line)
            tail = _loop_tails(ids, pieces, line, ITEM_MIN_CALLS)
            ids = split_periodic(pieces, calls["stack_id"].gather(idx).fill_null(-1)
                                 .to_numpy(), below, ITEM_MIN_CALLS)
            return (pl.Series("call_instance", np.where(ids >= 0, ids, -(at + 1)),
                              dtype=pl.Int64), tail, line)
        frame = calls.select("_thread", "ts_ns")[idx].with_columns(
            node.cast(pl.Int64).alias("user_node"))
        nodes = frame["user_node"].drop_nulls().unique()
        sp = spans.collect(spans.lazy().filter(pl.col("stack_id").is_in(nodes.implode()))
                           .select(instance_columns()))
        found = _span_starts(frame, sp).to_numpy()
        # a call outside any span of its frame is its own instance (by its row, not its place)
        return (pl.Series("call_instance", np.where(found >= 0, found, -(at + 1)),
                          dtype=pl.Int64), np.zeros(len(at), bool), np.full(len(at), -1))

    def _once_obj(self, name: str, build):
        if name not in self._objects:
            self._objects[name] = build()
        return self._objects[name]

    def shared(self, name: str, build):
        """``build()`` once per analysis: what every finding's fix model reads alike (the
        capture's typical async copy call, its host link's bandwidth)."""
        return self._once_obj(f"shared:{name}", build)

    def _build_gaps(self, want: set[str], wheres: list[dict] | None = None) -> pl.DataFrame:
        gaps = self.facts.gaps.with_row_index("gap_idx").select(
            pl.col("gap_idx").cast(pl.Int64), "device_id", "ts_ns", "end_ns", "dur_ns",
            "next_row", "block_idx", pl.when(pl.col("block_idx").is_not_null())
            .then(pl.lit("sync")).otherwise(pl.lit("launch")).alias("cause"))
        # the gaps no rule can keep (the rules ask for long ones: the bundled trace x600 has
        # 5.7 M gaps, nearly all of microseconds) dropped before each is joined to its call
        gaps = self._keep(gaps, wheres)
        gpu = self.gpu_table()
        launcher = gpu["call_idx"].gather(gaps["next_row"])
        call_idx = pl.select(pl.coalesce(gaps["block_idx"], launcher)).to_series()
        calls = self.calls_table()
        c = take(calls.select("pid", "tid", "api", "correlation_id", "call_idx",
                              pl.col("ts_ns").alias("call_ts_ns"), "stack_id", "op_id"), call_idx)
        df = gaps.drop("block_idx").hstack(c).with_columns(*self.site_of(c["stack_id"]))
        if "in_op_ns" in want:
            df = df.with_columns(self._time_in_op(df))
        if "step" in want:
            df = df.with_columns(self.call_steps().gather(df["call_idx"]).alias("step"))
        return df.select([c for c in df.columns if c in want or c in ("gap_idx", "call_idx")])

    def _time_in_op(self, gaps: pl.DataFrame) -> pl.Series:
        """Per launch gap: how much of it the CPU spent inside the torch op whose launch ended
        it (from that op's span: Kineto records one per op). Null without spans."""
        spans = self.analysis.data.span_table
        if spans is None or spans.height == 0 or "op_id" not in spans.columns:
            return pl.repeat(None, gaps.height, dtype=pl.Int64, eager=True).alias("in_op_ns")
        import numpy as np

        launch = gaps.select((pl.col("cause") == "launch") & pl.col("op_id").is_not_null()
                             ).to_series().to_numpy()
        at = np.flatnonzero(launch)
        op_ts = np.full(gaps.height, np.iinfo(np.int64).min)
        found = op_span_starts(spans, gaps["pid"].gather(at).to_numpy(),
                               gaps["op_id"].gather(at).to_numpy())
        op_ts[at[found >= 0]] = found[found >= 0]
        start = np.maximum(gaps["ts_ns"].to_numpy(), op_ts)
        return pl.Series("in_op_ns", np.clip(gaps["end_ns"].to_numpy() - start, 0, None)).scatter(
            np.flatnonzero(gaps.select(pl.col("cause") != "launch").to_series().to_numpy()), None)

    def _build_gpu(self, want: set[str], wheres: list[dict] | None = None) -> pl.DataFrame:
        gpu = self.gpu_table()
        # Only the columns some rule reads (in the table's order) are filtered: the others
        # would be copied for every launched operation, then dropped.
        keep = want | {"stack_id", "call_idx", "gpu_idx"} | (
            {"size_bytes"} if "bytes" in want else set())
        frame = gpu.select([c for c in gpu.columns if c in keep])
        if want & set(MATMUL_COLUMNS):
            # the matmuls' columns before any row is dropped, so that one filter keeps only
            # the rows some rule can keep: a rule on matmul kernels (``intensity: {ge: 64}``)
            # otherwise keeps every kernel until they are added (at 10 M operations 5 M rows,
            # each kept column copied twice)
            frame = frame.with_columns(self._matmul_columns(frame["call_idx"]))
        if want & set(CONCAT_COLUMNS):  # (the same, for a rule on concatenations)
            frame = frame.with_columns(self._concat_columns(frame["call_idx"]))
        rows = self._keep(frame, wheres, gpu["call_idx"].is_not_null() & gpu["work"])
        calls = self.calls_table()
        idx = rows["call_idx"]
        call_cols = {"tid": "tid", "call_ts_ns": "ts_ns", "call_dur_ns": "dur_ns", "api": "api"}
        picked = [calls[src].gather(idx).alias(dst) for dst, src in call_cols.items()
                  if dst in want]
        df = rows.rename({"size_bytes": "bytes"}).with_columns(picked)
        df = df.with_columns(*self.site_of(df["stack_id"]), pl.col("bytes").fill_null(0))
        if "launch_wait_ns" in want:
            gaps = self.facts.gaps.filter(pl.col("block_idx").is_null()
                                          & pl.col("next_row").is_not_null())
            wait = pl.repeat(0, gpu.height, dtype=pl.Int64, eager=True).scatter(
                gaps["next_row"], gaps["dur_ns"])
            df = df.with_columns(wait.gather(df["gpu_idx"]).alias("launch_wait_ns"))
        if "step" in want:
            df = df.with_columns(self.call_steps().gather(idx).alias("step"))
        return df.select([c for c in df.columns if c in want
                          or c in ("stack_id", "call_idx", "gpu_idx")])

    def _build_attention(self, want: set[str], wheres: list[dict] | None = None
                         ) -> pl.DataFrame:
        """The kernels of attention written out by hand (:mod:`zym.analysis.attention`), each
        with its launching call's columns and its attention's softmax's site."""
        gpu = self.gpu_table()
        found = pl.DataFrame(schema={"gpu_idx": pl.Int64, "role": pl.String,
                                     "attention": pl.Int64})
        if (gpu["op_class"] == "softmax").any():
            found = self._once_obj("attention kernels", lambda: self._attention_kernels(gpu))
        # the kernels' own columns (a gather: gpu_idx is the row), and the attention's site:
        # its softmax's stack
        cols = [c for c in gpu.columns if c in want | {"call_idx"}
                and c not in ("gpu_idx", "stack_id")]
        rows = found.with_columns(*[gpu[c].gather(found["gpu_idx"]) for c in cols],
                                  gpu["stack_id"].gather(found["attention"]).alias("stack_id"))
        if "fused_ns" in want:
            rows = rows.join(self._fused_ns(found, gpu), on="attention", how="left",
                             maintain_order="left")
        rows = self._keep(rows, wheres)
        calls = self.calls_table()
        idx = rows["call_idx"]
        call_cols = {"pid": "pid", "tid": "tid", "call_ts_ns": "ts_ns", "call_dur_ns": "dur_ns",
                     "api": "api", "correlation_id": "correlation_id"}
        picked = [calls[src].gather(idx).alias(dst) for dst, src in call_cols.items()
                  if dst in want and dst not in rows.columns]
        df = rows.with_columns(picked).with_columns(*self.site_of(rows["stack_id"]))
        if "step" in want:
            df = df.with_columns(self.call_steps().gather(idx).alias("step"))
        return df.select([c for c in df.columns if c in want
                          or c in ("stack_id", "call_idx", "gpu_idx")])

    @staticmethod
    def _fused_ns(found: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
        """Per attention of ``found``: what its fused kernel would take on the GPU
        (``fused_ns``: :func:`zym.analysis.attention.fused_ratio` of its matmuls)."""
        from .attention import fused_ratio

        mm = found.filter(pl.col("role").is_in(["scores", "output"]))
        per = (mm.with_columns(gpu["dur_ns"].gather(mm["gpu_idx"]).alias("dur"),
                               gpu["precision"].gather(mm["gpu_idx"]).cast(pl.String)
                               .alias("math"))
               .group_by("attention").agg(pl.col("dur").sum().alias("pair"),
                                          pl.col("math").sort_by("gpu_idx").first()))
        ratio = fused_ratio(per["math"].to_numpy(), per["pair"].to_numpy().astype(float))
        return per.select("attention", pl.Series("fused_ns", np.round(
            per["pair"].to_numpy() * ratio).astype(np.int64)))

    def _attention_kernels(self, gpu: pl.DataFrame) -> pl.DataFrame:
        """:func:`zym.analysis.attention.find_attention` on the window's kernels: those of
        the user functions that launched a softmax, in launch order per thread."""
        from .attention import BMM_OPS, ROLES, SCALE_OPS, find_attention

        k = gpu.filter(pl.col("work") & pl.col("call_idx").is_not_null()
                       & (pl.col("kind") == "kernel")).select("gpu_idx", "call_idx", "stack_id",
                                                             "op_class")
        # per site (the site table's rows, few): the user function's and line's keys, the
        # op's kind, and whether a copy ran inside aten::matmul
        table, row = self.facts.site_table_rows(k["stack_id"])
        chain = table["op_chain"].cast(pl.String)
        per_site = table.select(
            pl.struct(pl.col("user_file").cast(pl.String), pl.col("user_function").cast(pl.String))
            .rank("dense").alias("fn"),
            pl.struct(pl.col("user_file").cast(pl.String), pl.col("user_function").cast(pl.String),
                      "user_line").rank("dense").alias("line"),
            pl.col("torch_op").cast(pl.String).is_in(list(BMM_OPS)).fill_null(False).alias("bmm"),
            pl.col("torch_op").cast(pl.String).is_in(list(SCALE_OPS)).fill_null(False)
            .alias("scale"),
            chain.is_not_null().alias("known"),
            chain.str.contains(";aten::matmul;", literal=True).fill_null(False).alias("matmul"))
        fn = per_site["fn"].to_numpy()[row]
        mine = np.isin(fn, np.unique(fn[(k["op_class"] == "softmax").to_numpy()]))
        k, row = k.filter(pl.Series(mine)), row[mine]
        calls = self.calls_table()
        order = k.select(calls["pid"].gather(k["call_idx"]).alias("pid"),
                         calls["tid"].gather(k["call_idx"]).alias("tid"), "call_idx", "gpu_idx"
                         ).with_row_index("_at").sort("pid", "tid", "call_idx", "gpu_idx")
        at0 = order["_at"].to_numpy()
        k, row = k[at0], row[at0]
        thread = order.select(pl.struct("pid", "tid").rank("dense")).to_series().to_numpy()
        site = {c: per_site[c].to_numpy()[row] for c in per_site.columns}
        at, role, owner = find_attention(
            thread, k["op_class"].cast(pl.String).fill_null("").to_numpy(), site["bmm"],
            site["scale"], site["known"], site["matmul"], site["fn"], site["line"])
        gpu_idx = k["gpu_idx"].cast(pl.Int64).to_numpy()
        return pl.DataFrame({"gpu_idx": gpu_idx[at],
                             "role": pl.Series(np.asarray(ROLES)[role], dtype=pl.String),
                             "attention": gpu_idx[owner]},
                            schema={"gpu_idx": pl.Int64, "role": pl.String,
                                    "attention": pl.Int64})

    def _build_paths(self, want: set[str], wheres: list[dict] | None = None) -> pl.DataFrame:
        paths = self.analysis.call_paths.paths
        df = paths.select([c for c in paths.columns if c in COLUMNS["paths"]
                           and c not in SITE_COLUMNS]).with_columns(
            pl.col("path_id").alias("stack_id"))
        df = df.with_columns(*self.site_of(df["stack_id"]))
        return df.select([c for c in df.columns if c in want or c in ("stack_id", "path_id")])

    def _build_steps(self, want: set[str], wheres: list[dict] | None = None) -> pl.DataFrame:
        steps = self.analysis.steps_in_window()
        schema = {"step": pl.Int64, "pid": pl.Int64, "tid": pl.Int64, "ts_ns": pl.Int64,
                  "dur_ns": pl.Int64, "end_ns": pl.Int64, "function": pl.String,
                  "launches": pl.Int64, "launch_from": pl.String,
                  "launch_from_share": pl.Float64, "launch_from_callee": pl.String,
                  "launch_from_calls": pl.Int64, "launch_next": pl.String,
                  "launch_next_share": pl.Float64, "calls": pl.Int64, "syncs": pl.Int64,
                  "size_syncs": pl.Int64, "blocked_ns": pl.Int64, "cpu_call_ns": pl.Int64, "gpu_ns": pl.Int64,
                  "busy_ns": pl.Int64, "busy_frac": pl.Float64, "quiet_ns": pl.Int64,
                  "quiet_frac": pl.Float64, "quiet_idx": pl.Int64, "quiet_py_ns": pl.Int64,
                  "quiet_until": pl.String, "quiet_where": pl.String, "torch_ops": pl.Int64,
                  "grad_ops": pl.Int64, "backward_ops": pl.Int64, "grad_cpu_ns": pl.Int64,
                  "train_kernels": pl.Int64, "train_gpu_ns": pl.Int64}
        if steps is None or not steps.count:
            return pl.DataFrame(schema=schema)
        calls = self.calls_table().with_columns(self.call_steps())
        if "size_syncs" in want:
            calls = calls.with_columns(*self.site_of(calls["stack_id"], ("size_op",)))
        sizing = (pl.col("kind") == "sync") & pl.col("size_op").is_not_null() \
            if "size_syncs" in want else pl.lit(False)
        per = (calls.filter(pl.col("step").is_not_null()).group_by("step").agg(
            pl.col("pid").first(), pl.col("tid").first(),
            (pl.col("kind") == "launch").sum().cast(pl.Int64).alias("launches"),
            pl.len().cast(pl.Int64).alias("calls"),
            (pl.col("kind") == "sync").sum().cast(pl.Int64).alias("syncs"),
            sizing.sum().cast(pl.Int64).alias("size_syncs"),
            pl.col("dur_ns").filter("blocking").sum().alias("blocked_ns"),
            pl.col("dur_ns").sum().alias("cpu_call_ns")))
        gpu_per = self._step_gpu(calls)
        frame = _step_frame(steps)
        busy = _overlap(frame, self.facts.busy)
        df = (frame.with_columns((pl.col("end_ns") - pl.col("ts_ns")).alias("dur_ns"),
                                 pl.lit(steps.function).alias("function"), busy.alias("busy_ns"))
              .join(per, on="step", how="left").join(gpu_per, on="step", how="left")
              .with_columns(pl.col("launches", "calls", "syncs", "size_syncs", "blocked_ns",
                                   "cpu_call_ns", "gpu_ns").fill_null(0))
              .with_columns((pl.col("busy_ns") / pl.col("dur_ns")).alias("busy_frac")))
        if want & {"quiet_ns", "quiet_frac", "quiet_idx", "quiet_py_ns", "quiet_until",
                   "quiet_where"}:
            on = _on_steps_thread(calls, steps)
            df = df.join(self._quiet(), on="step", how="left").with_columns(
                pl.col("quiet_ns").fill_null(pl.col("dur_ns")),
                pl.col("_stretch_ns").fill_null(pl.col("dur_ns")),
                pl.col("quiet_end").fill_null(pl.col("end_ns")))
            df = df.with_columns((pl.col("quiet_ns") / pl.col("dur_ns")).alias("quiet_frac"))
            if want & {"quiet_py_ns", "quiet_where"}:
                df = df.with_columns(self._quiet_spans(df, calls, on))
            if "quiet_until" in want:
                df = df.with_columns(self._until(df, calls))
        if want & {"launch_from", "launch_from_share", "launch_next", "launch_next_share",
                   "launch_from_callee", "launch_from_calls"}:
            df = df.join(self._launch_from(calls, steps), on="step", how="left")
        if want & {"torch_ops", "grad_ops", "backward_ops", "grad_cpu_ns"}:
            from .training import AUTOGRAD_NS_PER_OP, op_counts

            ops = ("torch_ops", "grad_ops", "backward_ops")
            df = (df.join(op_counts(self.analysis, steps.start_ns, steps.end_ns), on="step",
                          how="left").with_columns(pl.col(*ops).fill_null(0))
                  .with_columns((pl.col("grad_ops") * AUTOGRAD_NS_PER_OP).alias("grad_cpu_ns")))
        if want & {"train_kernels", "train_gpu_ns"}:
            from .training import train_mode_kernels

            train = self.gpu_table().select("call_idx", "dur_ns").filter(
                train_mode_kernels(self.analysis)["found"])
            train = (pl.DataFrame({"step": calls["step"].gather(train["call_idx"]),
                                   "dur_ns": train["dur_ns"]})
                     .filter(pl.col("step").is_not_null())
                     .group_by("step").agg(pl.len().cast(pl.Int64).alias("train_kernels"),
                                           pl.col("dur_ns").sum().alias("train_gpu_ns")))
            df = (df.join(train.cast({"step": pl.Int64}), on="step", how="left")
                  .with_columns(pl.col("train_kernels", "train_gpu_ns").fill_null(0)))
        return df.select([c for c in schema if c in want or c == "step"])

    def _build_items(self, want: set[str], wheres: list[dict] | None = None) -> pl.DataFrame:
        """One row per step and function it calls once per item (:meth:`item_calls`; the
        calls of one function from two places, each once per item, one row: the encoder's
        tile loop run on both scenes of a step), with its step's columns (the steps
        relation's)."""
        step_cols = ["step", "pid", "tid", "function", "ts_ns", "dur_ns", "end_ns", "busy_ns",
                     "gpu_ns"]
        item_cols = ["item_function", "item_calls", "item_launches", "item_span_ns"]
        schema = {"item": pl.Int64, **{c: pl.Int64 for c in step_cols + item_cols}}
        schema["function"] = schema["item_function"] = pl.String
        table = self.item_calls().table
        if table.height == 0:
            return pl.DataFrame(schema=schema).select(
                [c for c in schema if c in want or c == "item"])
        per = (table.group_by("step", "item_function")
               .agg(pl.col("item_calls", "item_launches").sum(),
                    (pl.col("item_end_ns").max() - pl.col("item_start_ns").min())
                    .alias("item_span_ns"))
               .sort("step", "item_function"))
        steps = self._build_steps(set(step_cols))
        return (per.join(steps.select(step_cols), on="step", how="left")
                .with_row_index("item").with_columns(pl.col("item").cast(pl.Int64))
                .select([c for c in schema if c in want or c == "item"]))

    def _launch_from(self, calls: pl.DataFrame, steps) -> pl.DataFrame:
        """Per step (``calls``' ``step``): what the step function called that launched most
        of its kernels, and next most (:func:`zym.analysis.phases.under_step`), with their
        shares of the step's launches; what the first called that launched most of its
        kernels (the first user frame below it) and, from the Python spans, how many times
        the step called that (:meth:`_callee_calls`); empty without a step function's
        frames."""
        from .phases import under_step
        from .trie import NONE, Trie

        out = pl.DataFrame(schema={"step": pl.Int64, "launch_from": pl.String,
                                   "launch_from_share": pl.Float64,
                                   "launch_from_callee": pl.String,
                                   "launch_from_calls": pl.Int64, "launch_next": pl.String,
                                   "launch_next_share": pl.Float64})
        nodes = self.facts.nodes
        if steps.source == "profiler steps" or nodes.height == 0:
            return out
        trie = Trie.of(nodes)
        source, labels = under_step(nodes, steps, trie)
        own = nodes["kind"] != "python"   # an op or built-in the step function ran itself
        labels = labels.set(own.fill_null(True), f"{steps.function} itself")
        # below each node's source, its first user frame: the user's function the source
        # called (past library wrappers such as nn.Module's call)
        user = nodes["is_user"].fill_null(False).to_numpy()
        callee = trie.outermost(user & (source != NONE) & (source != np.arange(len(source))))
        mine = calls.filter(pl.col("step").is_not_null() & (pl.col("kind") == "launch"))
        rows = trie.rows_of(mine["stack_id"].to_numpy())
        at = np.maximum(rows, 0)
        src = np.where(rows >= 0, source[at], NONE)
        if not (src >= 0).any():
            return out
        # counted by source node first (integers, one row per launch), labelled after: the
        # labels (text) are read per step and source, not per launch
        counts = (pl.DataFrame({"step": mine["step"].cast(pl.Int64), "src": src,
                                "callee": np.where(rows >= 0, callee[at], NONE)})
                  .group_by("step", "src", "callee").agg(pl.len().alias("n")))
        # the callee with the most launches (ties: the lower node row, not the hash order)
        most = pl.col("callee").sort_by(["n", "callee"], descending=[True, False]).first()
        per = counts.group_by("step", "src").agg(pl.col("n").sum(), most)
        src_rows = per["src"].to_numpy()
        per = per.with_columns(labels.gather(np.maximum(src_rows, 0))
                               .set(pl.Series(src_rows < 0), None).alias("label"))
        ranked = (per.group_by("step", "label").agg(pl.col("n").sum(), most)
                  .with_columns((pl.col("n") / pl.col("n").sum().over("step")).alias("share"))
                  .filter(pl.col("label").is_not_null())
                  .sort(["step", "n", "label"], descending=[False, True, False])
                  .group_by("step", maintain_order=True)
                  .agg(pl.col("label", "share").head(2), pl.col("callee").first()))
        top = ranked["callee"].to_numpy()
        ids = self.facts.nodes["stack_id"].to_numpy()
        return ranked.select(
            "step", pl.col("label").list.get(0, null_on_oob=True).alias("launch_from"),
            pl.col("share").list.get(0, null_on_oob=True).alias("launch_from_share"),
            pl.col("label").list.get(1, null_on_oob=True).alias("launch_next"),
            pl.col("share").list.get(1, null_on_oob=True).alias("launch_next_share"),
        ).with_columns(
            labels.gather(np.maximum(top, 0)).set(pl.Series(top < 0), None)
            .alias("launch_from_callee"),
            self._callee_calls(ranked["step"].to_numpy(), np.where(top >= 0, ids[np.maximum(
                top, 0)], -1), steps).alias("launch_from_calls"))

    def item_calls(self) -> ItemCalls:
        """The functions each step calls once per item, and their calls (:class:`ItemCalls`),
        once per analysis: the items relation and the per-item batching fix read it alike."""
        return self._once_obj("item calls", self._item_calls)

    def _item_calls(self) -> ItemCalls:
        """Per step, the functions it calls once per item, each with the CUDA calls made
        inside each of its calls (:class:`ItemCalls`). The first: the function below the step
        function that launched most of the step's kernels (its outermost user frame there:
        ``launch_from``'s), or, where the step calls that fewer than :data:`ITEM_MIN_CALLS`
        times, the user function below it that launched most, and so on down the user frames
        (``Service.encode`` -> its list comprehension -> ``Model.encode`` once per tile): the
        first the step calls :data:`ITEM_MIN_CALLS` times or more (its calls from the spans,
        else from the stacks' runs: :meth:`_frame_instances`). Then the same again among the
        launches outside the functions found (and outside the loops found to be no items, and,
        at each level, past the frames found called too few times), up to
        :data:`ITEM_MAX_FUNCTIONS` functions a step: a step that runs a tile loop through its
        encoder and another through its decoder has both. Only Python functions: an op the
        step function runs itself is no item function (the loop body's join their items).
        Below the user frames, a library's Python function called from user code
        (:func:`_library_entries`: ``F.grid_sample`` in the user's loop over faces) is a level
        too, labelled with its caller (:func:`_item_label`); once one is found, the other
        library functions its caller calls in that step are looked past (they may be the same
        loop's body: :func:`_attach_loop_ops`). A function's calls are those
        from the same caller line (its node's frame code: the line's own node with eBPF
        stacks, any line inside it).

        Not items (no function for the step at that level, and nothing below them): a module
        called inside another module's forward (a model's layers, each its own weights, one
        after the other), and calls between most of which the step reads the GPU's values back
        (:func:`_read_between`: a loop that decides from them whether to go on, or feeds them
        back, as a generation loop does with its tokens: each call needs the one before it),
        or, without spans, most of which read a scalar back in the function's own code (a stop
        check: with eBPF stacks, a loop inside the function, whose line goes back as a new
        call's would)."""
        from .instances import Ancestors, frame_codes
        from .phases import under_step
        from .replay import in_sorted, sorted_unique

        none = ItemCalls.empty()
        steps = self.analysis.steps_in_window()
        nodes = self.facts.nodes
        if steps is None or not steps.count or steps.source == "profiler steps" \
                or nodes.height == 0:
            return none
        anc = self._once_obj("ancestors", lambda: Ancestors(nodes))
        trie = anc.trie
        source, labels = under_step(nodes, steps, trie)
        user = nodes["is_user"].fill_null(False).to_numpy()
        code = frame_codes(anc)
        func = np.unique(anc.key, return_inverse=True)[1].astype(np.int64)  # the function
        enclosed = _inside_another_module(nodes, trie)
        calls = self.calls_table()
        idx = _on_steps_thread(calls, steps)
        idx = idx[self.call_steps().gather(idx).is_not_null().to_numpy()]
        if not len(idx):
            return none
        r = trie.rows_of(calls["stack_id"].gather(idx).fill_null(-1).to_numpy())
        launch = (calls["kind"].gather(idx) == "launch").fill_null(False).to_numpy()
        step = self.call_steps().gather(idx).cast(pl.Int64).to_numpy()
        ts = calls["ts_ns"].gather(idx).to_numpy()
        end = ts + calls["dur_ns"].gather(idx).to_numpy()
        copy = (calls["kind"].gather(idx) == "copy").fill_null(False)
        dtoh = (copy & (calls["copy_kind"].gather(idx) == "DtoH").fill_null(False)).to_numpy()
        htod = (copy & (calls["copy_kind"].gather(idx) == "HtoD").fill_null(False)).to_numpy()
        scalar = self._scalar_reads(idx, dtoh)
        ids = nodes["stack_id"].cast(pl.Int64).to_numpy()
        n_nodes, n_steps = len(ids), int(step.max()) + 1
        library = _library_entries(nodes, trie, user)
        levels = _frame_levels(r, source, user | library, trie)
        chosen: list[pl.DataFrame] = []
        members: list[tuple[np.ndarray, ...]] = []
        taken = np.zeros(len(idx), bool)   # inside a function found, or a loop of no items
        n_func = int(func.max(initial=0)) + 1
        recurrent: list[np.ndarray] = []   # (step, function) of the loops of no items
        # per level, the calls whose frame there was a step's top and called too few times:
        # the next round looks past it at that level (a step's sequential clustering
        # launching more than the per-segment scoring beside it), still into it below
        passed = [np.zeros(len(idx), bool) for _ in levels]
        # an op or built-in the step function ran itself is no item function (the loop body's
        # ops join the item they come before, below): only a Python function's calls are items
        op = (nodes["kind"] != "python").fill_null(True).to_numpy()
        passed = [seen | ((lv >= 0) & op[np.maximum(lv, 0)]) for seen, lv in zip(passed, levels)]
        per_step = np.zeros(n_steps, np.int64)   # functions found in each step
        for _ in range(3 * ITEM_MAX_FUNCTIONS):
            done = per_step >= ITEM_MAX_FUNCTIONS  # steps given a function this round, ...
            progress = False
            for depth, (lv, seen) in enumerate(zip(levels, passed)):
                free = ~taken & ~done[step]
                top_step, top_node = _top_per_step(step, lv, launch & free & ~seen, n_nodes)
                keep = ~enclosed[top_node]
                top_step, top_node = top_step[keep], top_node[keep]
                if not len(top_step):
                    continue
                want = np.full(n_steps, -2, np.int64)
                want[top_step] = code[top_node]
                under = np.flatnonzero(free & (np.where(lv >= 0, code[np.maximum(lv, 0)], -1)
                                               == want[step]))
                if not len(under):
                    continue
                nxt = (levels[depth + 1][under] if depth + 1 < len(levels)
                       else np.full(len(under), NONE, np.int64))
                # (a frame not the user's own, torch's module wrapper the step function
                # called around a model's layers, is never split: as if one function below)
                below = np.where(~user[np.maximum(lv[under], 0)], WHOLE,
                                 np.where(nxt >= 0, code[np.maximum(nxt, 0)], -1))
                found = self._item_loop(idx[under], step[under], ids[lv[under]], launch[under],
                                        ts[under], end[under], scalar[under], ts[scalar],
                                        ts[dtoh], ts[htod], below)
                steps_u, n_calls, n_launch, lo, hi, inst, dependent, looped, lines = found
                # a loop whose calls need each other's outputs: what its calls call is no item
                # (a function called fewer times is no loop: what it calls is looked into)
                loop = np.zeros(n_steps, bool)
                loop[steps_u[n_calls >= ITEM_MIN_CALLS]] = True
                dependent = dependent[loop[dependent]]
                no_items = np.zeros(n_steps, bool)
                no_items[dependent] = True
                recurrent.append(dependent * n_func + func[top_node[np.searchsorted(
                    top_step, dependent)]])
                taken[under[no_items[step[under]]]] = True
                done[dependent] = True
                progress |= bool(len(dependent))
                few = np.zeros(n_steps, bool)
                few[steps_u[n_calls < ITEM_MIN_CALLS]] = True
                seen[under[few[step[under]]]] = True
                progress |= bool(few.any())
                good = (n_calls >= ITEM_MIN_CALLS) & ~done[steps_u]
                if not good.any():
                    continue
                node_of = np.full(n_steps, -1, np.int64)
                node_of[top_step] = top_node
                g_steps = steps_u[good]
                g_nodes = node_of[g_steps]
                caller = np.full(n_steps, -1, np.int64)   # the frame code that called it
                if depth:
                    up = levels[depth - 1][under]
                    caller[step[under]] = np.where(up >= 0, code[np.maximum(up, 0)], -1)
                chosen.append(pl.DataFrame({
                    "step": g_steps, "item_node": ids[g_nodes],
                    "item_function": _item_label(labels, g_nodes, library, trie.parent,
                                                 looped[good], lines[0][good], lines[1][good]),
                    "item_loop": looped[good],
                    "item_calls": n_calls[good],
                    "item_launches": n_launch[good], "item_start_ns": lo[good],
                    "item_end_ns": hi[good], "_row": g_nodes, "_parent": caller[g_steps]}))
                mine = np.zeros(n_steps, bool)
                mine[g_steps] = True
                # a library function found: the other library functions its caller calls in
                # that step are no items of their own (F.grid_sample after each
                # F.affine_grid: one loop), but may be its loop's body (_attach_loop_ops)
                lib_step = np.zeros(n_steps, bool)
                lib_step[g_steps[library[g_nodes]]] = True
                at_lv = np.maximum(lv, 0)
                same = (caller[step] == (code[np.maximum(levels[depth - 1], 0)] if depth
                                         else -1))
                seen[lib_step[step] & (lv >= 0) & library[at_lv] & (lv != node_of[step])
                     & same & free] = True
                keep = mine[step[under]] & (inst != AFTER_LOOP)
                members.append((idx[under][keep], inst[keep], step[under][keep],
                                node_of[step[under][keep]]))
                taken[under[mine[step[under]]]] = True
                done[g_steps] = True
                per_step[g_steps] += 1
                progress = True
            if not progress:
                break
        if not chosen:
            return none
        table = pl.concat([f.cast(ItemCalls.SCHEMA) for f in chosen])
        at, inst, st, node = (np.concatenate(x) for x in zip(*members))
        spans = self.analysis.data.span_table
        if spans is not None and spans.height > 0:   # (instances: the calls' span starts)
            table, (at, inst, st, node) = _attach_loop_ops(
                table, (at, inst, st, node),
                _loop_body_calls(levels, ~taken, op, user, library, code, r,
                                 (idx, step, ts, end, launch)))
        # a function whose loop in a step needs each call's output (a recurrent model's
        # forecast) is no item function elsewhere in that step either (its spin-up over the
        # observed frames, with no value read back between the calls, carries its state too)
        if recurrent:
            dep = sorted_unique(np.concatenate(recurrent))
            ok = ~in_sorted(dep, table["step"].to_numpy() * n_func
                            + func[table["_row"].to_numpy()])
            table = table.filter(pl.Series(ok))
            keep = ~in_sorted(dep, st * n_func + func[node])
            at, inst, st, node = at[keep], inst[keep], st[keep], node[keep]
        if table.height == 0:
            return none
        table = table.select(ItemCalls.SCHEMA.keys()).sort("step", "item_node")
        order = np.argsort(at, kind="stable")
        return ItemCalls(table, at[order], inst[order], st[order], ids[node[order]])

    def _item_loop(self, at: np.ndarray, st: np.ndarray, frame: np.ndarray, launch: np.ndarray,
                   ts: np.ndarray, end: np.ndarray, scalar: np.ndarray, scalar_ts: np.ndarray,
                   read_ts: np.ndarray, upload_ts: np.ndarray, below: np.ndarray) -> tuple:
        """One function's calls per step, from the CUDA calls ``at`` (in time order, of steps
        ``st``) made inside it (``frame``: its stack node for each, whose calls are counted;
        ``launch``, ``ts``, ``end``, ``scalar``: each one's kind, times and whether it reads a
        scalar back; ``below``: the item search's next frame under it, as its function and
        caller line (:func:`~zym.analysis.instances.frame_codes`), -1, or :data:`WHOLE`): the
        steps, their calls of it, the launches inside them, their first CUDA call's start and
        their last one's end, each CUDA call's call of it, and the steps whose loop of it is no
        loop of items (its
        calls read the GPU's values back between them: ``scalar_ts``, ``read_ts``,
        ``upload_ts``, every such read of the thread; or, without spans, in most of its calls,
        in its own code, a scalar)."""
        inst, tail, line = self._frame_instances(pl.Series(at), pl.Series(frame), below)
        inst = inst.to_numpy()
        # the code after a loop inside one call of the function is no iteration's: its calls
        # count for none (the loop's iterations are the items; where a step has such code,
        # its items are a loop's iterations: ``looped``, their lines ``lines``)
        looped_at = np.unique(st[tail])
        if tail.any():
            keep = ~tail
            at, st, launch, ts, end, scalar, inst, frame, line = (
                a[keep] for a in (at, st, launch, ts, end, scalar, inst, frame, line))
        # per step (the calls in time order: a step's are one run, and so are each of
        # the function's calls'): its calls of the function, their launches and span
        begins = np.flatnonzero(np.r_[True, st[1:] != st[:-1]])
        new_call = np.r_[True, (inst[1:] != inst[:-1]) | (st[1:] != st[:-1])]
        steps_u = st[begins]
        n_calls = np.add.reduceat(new_call.astype(np.int64), begins)
        n_launch = np.add.reduceat(launch.astype(np.int64), begins)
        lo, hi = np.minimum.reduceat(ts, begins), np.maximum.reduceat(end, begins)
        dependent = _read_between(st, inst, ts, end, scalar_ts, read_ts, upload_ts)
        # or, without spans, that reads a scalar back in the function's own code in most of
        # its calls (its stop check: with eBPF stacks, a loop inside the function, told apart
        # from calls of it by its line going back, is this; the spans tell calls apart: a
        # per-item decode reading its results is items)
        own = np.zeros(len(at), bool)
        reads = np.flatnonzero(scalar)
        spans = self.analysis.data.span_table
        if len(reads) and (spans is None or spans.height == 0):
            calls = self.calls_table()
            user = self.site_of(calls["stack_id"].gather(at[reads]), ("user_node",))[0]
            own[reads] = user.cast(pl.Int64).fill_null(-1).to_numpy() == frame[reads]
        per_call = np.flatnonzero(new_call)
        has = np.add.reduceat(own.astype(np.int64), per_call) > 0
        s_u, where = np.unique(st[per_call], return_inverse=True)
        share = np.bincount(where, weights=has) / np.bincount(where)
        dependent = np.union1d(dependent, s_u[share >= 0.5]).astype(np.int64)
        looped = np.isin(steps_u, looped_at)
        lines = (np.minimum.reduceat(line, begins), np.maximum.reduceat(line, begins))
        if tail.any():   # the instances of every call given, those after a loop AFTER_LOOP
            full = np.full(len(tail), AFTER_LOOP, np.int64)
            full[~tail] = inst
            inst = full
        return steps_u, n_calls, n_launch, lo, hi, inst, dependent, looped, lines

    def _scalar_reads(self, idx: np.ndarray, dtoh: np.ndarray) -> np.ndarray:
        """Which of the calls ``idx`` (``dtoh``: those that copy device to host) read a GPU
        scalar back: a copy under ``aten::_local_scalar_dense`` (``.item()``, ``bool()``,
        ``int()`` of a tensor), or of 8 bytes or fewer (eBPF captures record no torch ops; as
        ``syncs.scalar-readback`` finds them)."""
        calls = self.calls_table()
        out = np.zeros(len(idx), bool)
        at = np.flatnonzero(dtoh)
        if not len(at):
            return out
        rows = pl.Series(idx[at])
        chain = self.site_of(calls["stack_id"].gather(rows), ("op_chain",))[0].cast(pl.String)
        scalar = chain.str.contains(";aten::(_local_scalar_dense|item|is_nonzero);")
        small = (calls["bytes"].gather(rows).fill_null(1 << 30) <= 8 if "bytes" in calls.columns
                 else pl.Series([False] * len(at)))
        out[at] = (scalar.fill_null(False) | small.fill_null(False)).to_numpy()
        return out

    def _callee_calls(self, step: np.ndarray, node: np.ndarray, steps) -> pl.Series:
        """Per (``step``, stack ``node``; -1: none): the Python spans of that node on the
        steps' thread that start in that step (its calls there), where two or more; else null
        (null too without spans). One query of the spans of those nodes."""
        from .facts import thread_key

        spans = self.facts.data.span_table
        none = pl.Series([None] * len(step), dtype=pl.Int64)
        wanted = np.unique(node[node >= 0])
        if spans is None or not len(wanted):
            return none
        got = spans.collect(spans.lazy()
                            .filter(pl.col("stack_id").is_in(pl.Series(wanted).implode())
                                    & (thread_key() == steps.thread))
                            .select("stack_id", "ts_ns"))
        if got.height == 0:
            return none
        starts, ends = steps.start_ns, steps.end_ns
        at = np.searchsorted(starts, got["ts_ns"].to_numpy(), side="right") - 1
        inside = (at >= 0) & (got["ts_ns"].to_numpy() < ends[np.maximum(at, 0)])
        n = (pl.DataFrame({"step": at[inside], "node": got["stack_id"].to_numpy()[inside]})
             .group_by("step", "node").len())
        calls = (pl.DataFrame({"step": step.astype(np.int64), "node": node.astype(np.int64)})
                 .join(n.cast({"step": pl.Int64, "node": pl.Int64}), on=["step", "node"],
                       how="left", maintain_order="left")["len"].cast(pl.Int64))
        return calls.set(calls < 2, None).alias("launch_from_calls")

    def _step_gpu(self, calls: pl.DataFrame) -> pl.DataFrame:
        """Per step (``calls``' ``step``), the GPU time of the work its calls launched."""
        gpu = self.gpu_table().filter(pl.col("work") & pl.col("call_idx").is_not_null())
        return (pl.DataFrame({"step": calls["step"].gather(gpu["call_idx"]),
                              "dur_ns": gpu["dur_ns"]})
                .filter(pl.col("step").is_not_null())
                .group_by("step").agg(pl.col("dur_ns").sum().alias("gpu_ns")))

    def _until(self, stretches: pl.DataFrame, calls: pl.DataFrame) -> pl.Series:
        """The site of the call that ended each stretch (``quiet_idx``): null where none did
        or the step function's return did (``_at_return``)."""
        at = stretches["quiet_idx"]
        stack = calls["stack_id"].gather(at.fill_null(0)).set(
            at.is_null() | stretches["_at_return"].fill_null(False), None)
        return self.site_of(stack, ("site",))[0].cast(pl.String).alias("quiet_until")

    def _build_stretches(self, want: set[str], wheres: list[dict] | None = None
                         ) -> pl.DataFrame:
        """One row per stretch of a step's own work with no CUDA call on its thread
        (:meth:`_stretch_rows`) that is a phase of the step (:data:`STRETCH_MIN_SHARE` of it
        or more), placed in a function by the spans (``quiet_where``: its work
        :data:`WHERE_MIN_NS` or more) or not (no spans: a zym capture's), or that the spans
        place in a function that makes no CUDA call, and each step's longest (placed or not),
        with the window's steps' totals (one step function: the same in every row)."""
        steps = self.analysis.steps_in_window()
        schema = {"stretch": pl.Int64, "step": pl.Int64, "pid": pl.Int64, "tid": pl.Int64,
                  "function": pl.String, "ts_ns": pl.Int64, "dur_ns": pl.Int64,
                  "end_ns": pl.Int64, "longest": pl.Boolean, "quiet_idx": pl.Int64,
                  "quiet_py_ns": pl.Int64, "quiet_bare_ns": pl.Int64, "quiet_until": pl.String,
                  "quiet_where": pl.String, "step_ns": pl.Int64, "gpu_busy_ns": pl.Int64,
                  "steps": pl.Int64, "steps_ns": pl.Int64, "steps_bare_ns": pl.Int64,
                  "steps_busy_ns": pl.Int64, "steps_gpu_ns": pl.Int64}
        if steps is None or not steps.count:
            return pl.DataFrame(schema=schema)
        calls = self.calls_table().with_columns(self.call_steps())
        frame = _step_frame(steps)
        on = _on_steps_thread(calls, steps)
        rows = self._step_stretches().filter("_own")
        # a step without a call: the whole of it, ended by none
        bare = frame.join(rows.select("step").unique(), on="step", how="anti")
        rows = pl.concat([rows.select("step", "quiet_end", "_stretch_ns", "quiet_idx",
                                      "_at_return", "longest", "_phase"),
                          bare.select("step", pl.col("end_ns").alias("quiet_end"),
                                      (pl.col("end_ns") - pl.col("ts_ns")).alias("_stretch_ns"),
                                      pl.lit(None, pl.Int64).alias("quiet_idx"),
                                      pl.lit(False).alias("_at_return"),
                                      pl.lit(True).alias("longest"),
                                      pl.lit(True).alias("_phase"))]).sort("quiet_end")
        rows = rows.with_columns(self._quiet_spans(rows, calls, on))
        # a phase of its step (placed or not: without spans, each of a step's host phases,
        # not its longest alone), or placed and spent in a function that makes no CUDA call
        # (the IoU loop run once a frame between the frame's kernels), not the Python between
        # the launches of a function that makes them (a forward's, a handler's)
        rows = rows.filter(pl.col("longest") | pl.col("_phase")
                           | (pl.col("quiet_where").is_not_null() & pl.col("_cpu_only")))
        if "quiet_until" in want:
            rows = rows.with_columns(self._until(rows, calls))
        pid, tid = ((int(calls[c][int(on[0])]) for c in ("pid", "tid")) if len(on)
                    else (None, None))
        gpu = self._step_gpu(calls)["gpu_ns"].sum()
        busy = _overlap(frame, self.facts.busy).sum()
        span = frame.select((pl.col("end_ns") - pl.col("ts_ns")).sum()).item()
        # without what recording the capture cost: the steps' time as the unfixed replay
        # without it ends the window, and each stretch less the CPU time the recording
        # added before the call that ended it (analysis.recording_cost): a step's CPU phase
        # keeps its share of a step whose other parts the recording slowed more (a launch
        # loop's ops against a numpy filter's few calls)
        cost = np.asarray(self.analysis.recording_cost)
        bare_span = self._bare(span, cost)
        ended = rows["quiet_idx"].fill_null(-1).to_numpy()
        added = np.where(ended >= 0, cost[np.maximum(ended, 0)], 0) if len(cost) else 0
        rows = rows.with_columns((pl.col("quiet_py_ns") - pl.Series(added, dtype=pl.Int64)
                                  if len(cost) else pl.col("quiet_py_ns"))
                                 .clip(0).alias("quiet_bare_ns"))
        rows = rows.with_columns(_overlap(rows.select(
            (pl.col("quiet_end") - pl.col("_stretch_ns")).alias("ts_ns"),
            pl.col("quiet_end").alias("end_ns")), self.facts.busy).alias("gpu_busy_ns"))
        return (rows.join(frame.select("step", (pl.col("end_ns") - pl.col("ts_ns"))
                                       .alias("step_ns")), on="step", how="left")
                .select(pl.int_range(pl.len(), dtype=pl.Int64).alias("stretch"),
                        "step", pl.lit(pid, pl.Int64).alias("pid"),
                        pl.lit(tid, pl.Int64).alias("tid"),
                        pl.lit(steps.function).alias("function"),
                        (pl.col("quiet_end") - pl.col("_stretch_ns")).alias("ts_ns"),
                        pl.col("_stretch_ns").alias("dur_ns"), pl.col("quiet_end").alias("end_ns"),
                        "longest", "quiet_idx", "quiet_py_ns", "quiet_bare_ns",
                        *(["quiet_until"] if "quiet_until" in want else []), "quiet_where",
                        "step_ns", "gpu_busy_ns", pl.lit(steps.count, pl.Int64).alias("steps"),
                        pl.lit(span, pl.Int64).alias("steps_ns"),
                        pl.lit(bare_span, pl.Int64).alias("steps_bare_ns"),
                        pl.lit(int(busy), pl.Int64).alias("steps_busy_ns"),
                        pl.lit(int(gpu or 0), pl.Int64).alias("steps_gpu_ns"))
                .select([c for c in schema if c in want or c == "stretch"]))

    def _bare(self, ns: int, cost: np.ndarray) -> int:
        """``ns`` of the window's time without what recording the capture cost (``cost``:
        per call, ``Analysis.recording_cost``): scaled as the unfixed replay without that
        cost shortens the whole window (``Timeline.uninstrumented_ns``); as recorded where
        there is no replay (no GPU side) or no cost to take out."""
        lo, hi = self.analysis.window
        if not cost.any() or hi <= lo:
            return int(ns)
        tl = self.analysis.timeline
        if not tl.usable:
            return int(ns)
        return round(ns * min(tl.uninstrumented_ns / (hi - lo), 1.0))

    def _quiet_spans(self, steps: pl.DataFrame, calls: pl.DataFrame, on: np.ndarray
                     ) -> list[pl.Series]:
        """Per row of ``steps`` (a step's stretch without a CUDA call, its longest for the
        steps relation: ``_stretch_ns`` long, ending at ``quiet_end`` with the call
        ``quiet_idx``), from the spans
        (Kineto): the time before
        the torch op whose CUDA call ended it began (``quiet_py_ns``: the CPU's own work, not
        that op planning or compiling before its launch; the whole stretch without spans),
        and where it went (``quiet_where``: the site of the innermost span, on the steps'
        thread (``on``: its calls) and outside the ops, that covers half of that time or more;
        null where none does, for work under :data:`WHERE_MIN_NS`, or without spans). Two
        small queries of the spans: the ops that ended the stretches, and the spans long
        enough to cover half of one."""
        q1 = steps["quiet_end"].to_numpy()
        q0 = q1 - steps["_stretch_ns"].to_numpy()
        py = pl.Series("quiet_py_ns", q1 - q0)
        none = pl.repeat(None, steps.height, dtype=pl.String, eager=True).alias("quiet_where")
        cpu_only = pl.repeat(False, steps.height, dtype=pl.Boolean, eager=True).alias("_cpu_only")
        spans = self.analysis.data.span_table
        if spans is None or spans.height == 0 or not len(on) or not len(q0):
            return [py, none, cpu_only]
        pid, tid = (int(calls[c][int(on[0])]) for c in ("pid", "tid"))
        mine = (pl.col("pid") == pid) & (pl.col("tid") == tid)
        # the op whose CUDA call ended each stretch: from its start on, the time is that op's
        at = steps["quiet_idx"]
        op = calls["op_id"].gather(at.fill_null(0)).set(at.is_null(), None)
        if op.null_count() < len(op):
            starts = spans.collect(spans.lazy().filter(mine & pl.col("op_id").is_in(
                op.drop_nulls().unique().implode())).group_by("op_id").agg(
                pl.col("ts_ns").min().alias("op_ts")))
            op_ts = (pl.DataFrame({"op_id": op}).join(starts, on="op_id", how="left",
                                                      maintain_order="left")["op_ts"]
                     .fill_null(q1.max() + 1).to_numpy())
            py = pl.Series("quiet_py_ns", np.clip(np.minimum(op_ts, q1) - q0, 0, None))
        work = py.to_numpy()
        named = np.flatnonzero(work >= WHERE_MIN_NS)
        if not len(named):
            return [py, none, cpu_only]
        # A span that covers half of an interval or more holds its midpoint: each step's
        # candidates are the spans, outside the ops and at least half its work long, that hold
        # its work's midpoint (a chain of nested calls), the deepest of them named.
        lo, hi = q0[named], q0[named] + work[named]
        mid, half = lo + (hi - lo) // 2, (hi - lo) // 2
        long = spans.collect(spans.lazy().filter(
            mine & pl.col("op_id").is_null() & (pl.col("dur_ns") >= int(half.min()))
            & (pl.col("ts_ns") <= int(mid.max()))
            & (pl.col("ts_ns") + pl.col("dur_ns") > int(mid.min())))
            .select("ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"), "stack_id"))
        if long.height == 0:
            return [py, none, cpu_only]
        ts, end = long["ts_ns"].to_numpy(), long["end"].to_numpy()
        order = np.argsort(mid, kind="stable")  # the midpoints each span holds: a range of them
        first = np.searchsorted(mid[order], ts, side="left")
        stop = np.searchsorted(mid[order], end, side="left")
        count = np.clip(stop - first, 0, None)
        span = np.repeat(np.arange(long.height), count)
        starts = np.repeat(first - (np.cumsum(count) - count), count)  # each range's offset
        k = order[np.arange(len(span)) + starts]
        covers = np.minimum(end[span], hi[k]) - np.maximum(ts[span], lo[k]) >= half[k]
        span, k = span[covers], k[covers]
        if not len(span):
            return [py, none, cpu_only]
        depth = (long.join(self.analysis.data.stacks.select("stack_id", "depth"), on="stack_id",
                           how="left", maintain_order="left")["depth"].fill_null(0).to_numpy())
        deepest = (pl.DataFrame({"k": k, "span": span, "depth": depth[span]})
                   .sort("depth", descending=True).unique("k", keep="first"))
        placed = long["stack_id"].gather(deepest["span"])
        label = self.site_of(placed, ("site",))[0]
        at = named[deepest["k"].to_numpy()]
        return [py, none.scatter(at, label.cast(pl.String)),
                cpu_only.scatter(at, pl.Series(~self._calls_under(placed, calls)))]

    def _calls_under(self, stacks: pl.Series, calls: pl.DataFrame) -> np.ndarray:
        """Per stack node of ``stacks``: whether any of ``calls`` (a CUDA call) was made at
        or below it (the function the node is makes CUDA calls, itself or through others)."""
        trie = Trie.of(self.analysis.data.stacks)
        made = np.zeros(len(trie), np.int64)
        rows = trie.rows_of(calls["stack_id"].drop_nulls().unique().cast(pl.Int64).to_numpy())
        made[rows[rows != NONE]] = 1
        below = trie.subtree_sums(made) > 0
        at = trie.rows_of(stacks.fill_null(-1).cast(pl.Int64).to_numpy())
        return np.where(at != NONE, below[np.maximum(at, 0)], True)   # unknown: as if it did

    @staticmethod
    def _stretch_rows(calls: pl.DataFrame, steps: pl.DataFrame, on: np.ndarray, tail: bool
                      ) -> pl.LazyFrame:
        """Every stretch of each step with no CUDA call on the step's thread (``_stretch_ns``
        long, ending at ``quiet_end`` with the call ``quiet_idx``), in the step's order:
        between two calls (``_part`` 0), from the step's start to its first call (1), and from
        its last call on (2: where a step starts at a line (``tail``: eBPF stacks, profiler
        steps) up to the step's end, ended by the next call on the thread (``on``), whose
        work before its first call falls there; where steps are found from spans, up to where
        the step function returned (``steps``' ``_ret``; none where the spans do not say):
        post-processing after the last copy back, ``_at_return``). Those are the step's own
        work (``_own``); where steps are found from spans, the whole time from the step's
        last call to its end (its own work up to the return, then any wait for the next
        step) is a row too (3, not its own)."""
        c = (calls.lazy().filter(pl.col("step").is_not_null())
             .select("step", "call_idx", "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns"))
                     .alias("end")).sort("step", "ts_ns"))
        row = ["step", "quiet_end", "_stretch_ns", "quiet_idx", "_at_return", "_own", "_part"]
        inner = (c.with_columns((pl.col("ts_ns") - pl.col("end").cum_max().shift(1)
                                 .over("step")).alias("_stretch_ns"))
                 .filter(pl.col("_stretch_ns").is_not_null())
                 .select("step", pl.col("ts_ns").alias("quiet_end"), "_stretch_ns",
                         pl.col("call_idx").alias("quiet_idx"), pl.lit(False).alias("_at_return"),
                         pl.lit(True).alias("_own"), pl.lit(0, pl.Int8).alias("_part")))
        ends = c.group_by("step").agg(pl.col("ts_ns").min().alias("first"),
                                      pl.col("call_idx").first().alias("first_idx"),
                                      pl.col("call_idx").last().alias("last_idx"),
                                      pl.col("end").max().alias("last"))
        ret = pl.col("_ret") if "_ret" in steps.columns else pl.lit(None, pl.Int64)
        parts = (steps.lazy().select("step", pl.col("ts_ns").alias("s0"),
                                     pl.col("end_ns").alias("s1"), ret.alias("ret"))
                 .join(ends, on="step", how="inner").collect())
        # the stretch after the last call ends at the next call on the steps' thread (if any)
        at = np.searchsorted(on, parts["last_idx"].to_numpy(), side="right")
        after = pl.Series("after", np.where(at < len(on), on[np.minimum(at, len(on) - 1)], -1))
        parts = parts.with_columns(after.set(after < 0, None).cast(pl.Int64))
        head = parts.select("step", pl.col("first").alias("quiet_end"),
                            (pl.col("first") - pl.col("s0")).alias("_stretch_ns"),
                            pl.col("first_idx").alias("quiet_idx"),
                            pl.lit(False).alias("_at_return"), pl.lit(True).alias("_own"),
                            pl.lit(1, pl.Int8).alias("_part"))
        # where the spans say where the function returned, its own work after its last call
        # ends there (none where they do not)
        own_end = pl.col("s1") if tail else pl.min_horizontal("ret", "s1")
        own_ns = (pl.col("s1") - pl.col("last") if tail else
                  pl.when(pl.col("ret").is_not_null())
                  .then(pl.max_horizontal(own_end - pl.col("last"), pl.lit(0))).otherwise(0))
        after_last = [parts.select("step", own_end.alias("quiet_end"), own_ns.alias("_stretch_ns"),
                                   pl.col("after").alias("quiet_idx"),
                                   pl.lit(not tail).alias("_at_return"),
                                   pl.lit(True).alias("_own"), pl.lit(2, pl.Int8).alias("_part"))]
        if not tail:
            after_last.append(parts.select(
                "step", pl.col("s1").alias("quiet_end"),
                (pl.col("s1") - pl.col("last")).alias("_stretch_ns"),
                pl.col("after").alias("quiet_idx"), pl.lit(False).alias("_at_return"),
                pl.lit(False).alias("_own"), pl.lit(3, pl.Int8).alias("_part")))
        cast = {"step": pl.Int64, "quiet_end": pl.Int64, "_stretch_ns": pl.Int64,
                "quiet_idx": pl.Int64}
        return pl.concat([inner.cast(cast).select(row),
                          *[f.lazy().cast(cast).select(row) for f in (head, *after_last)]])

    @staticmethod
    def _rank() -> pl.Expr:
        """The order in which a step's own stretches (:meth:`_stretch_rows`) are its longest:
        by length, then between its calls, from its start, after its last call."""
        return pl.col("_stretch_ns") * 4 + (3 - pl.col("_part").cast(pl.Int64))

    def _step_stretches(self) -> pl.DataFrame:
        """:meth:`_kept_stretches` of the window's steps, built once per analysis (the steps
        and the stretches relations read them)."""
        def build() -> pl.DataFrame:
            steps = self.analysis.steps_in_window()
            calls = self.calls_table().with_columns(self.call_steps())
            frame = _step_frame(steps)
            on = _on_steps_thread(calls, steps)
            if steps.returns_ns is not None:
                frame = frame.with_columns(pl.Series("_ret", steps.returns_ns, dtype=pl.Int64))
            return self._kept_stretches(calls, frame, on, steps.source != "spans")

        return self._once_obj("step stretches", build)

    @classmethod
    def _kept_stretches(cls, calls: pl.DataFrame, steps: pl.DataFrame, on: np.ndarray,
                        tail: bool) -> pl.DataFrame:
        """Of :meth:`_stretch_rows`, those the steps and stretches relations read: each step's
        own longest (``longest``), the others of its own work :data:`WHERE_MIN_NS` long or
        more (``_phase``: :data:`STRETCH_MIN_SHARE` of the step or more), and the time
        after its last call that is not its own (where the spans say where it returned)."""
        rows = cls._stretch_rows(calls, steps, on, tail)
        by = ["step", "_own"]
        top = pl.int_range(pl.len()).over(by) == cls._rank().arg_max().over(by)
        rows = rows.with_columns((pl.col("_own") & top).alias("longest"))
        # a phase of the step (a tenth of it or more: its pre-processing, its statistics
        # after the copy back), not the Python between the launches of its forward; shorter
        # ones long enough to place are kept too (``_phase`` false): the stretches relation
        # keeps those spent in a function that makes no CUDA call (a loop's CPU-only work)
        length = steps.lazy().select("step", (pl.col("end_ns") - pl.col("ts_ns")).alias("_len"))
        return (rows.join(length, on="step", how="left")
                .with_columns((pl.col("_stretch_ns") >= STRETCH_MIN_SHARE * pl.col("_len"))
                              .alias("_phase"))
                .filter(~pl.col("_own") | pl.col("longest")
                        | (pl.col("_stretch_ns") >= WHERE_MIN_NS))
                .select("step", "quiet_end", "_stretch_ns", "quiet_idx", "_at_return", "_own",
                        "longest", "_phase")
                .collect())

    def _quiet(self) -> pl.DataFrame:
        """:meth:`_quiet_of` the window's steps."""
        return self._quiet_of(self._step_stretches())

    @staticmethod
    def _quiet_of(rows: pl.DataFrame) -> pl.DataFrame:
        """Per step, its longest stretch with no CUDA call on the step's thread (``quiet_ns``:
        any of ``rows``, :meth:`_kept_stretches`), and the longest its own work fills
        (``_stretch_ns``), the call that ended it (``quiet_idx``), when (``quiet_end``) and
        whether the step function's return did (``_at_return``)."""
        quiet = rows.group_by("step").agg(
            pl.max_horizontal(pl.col("_stretch_ns").max(), pl.lit(0)).alias("quiet_ns"))
        own = rows.filter("longest").select(
            "step", pl.max_horizontal("_stretch_ns", pl.lit(0)).alias("_stretch_ns"),
            "quiet_idx", "quiet_end", "_at_return")
        return quiet.join(own, on="step", how="left")

    def _build_windows(self, want: set[str], wheres: list[dict] | None = None) -> pl.DataFrame:
        data = self.analysis.data
        empty = pl.DataFrame(schema={"device_id": pl.Int32, "window_index": pl.Int64,
                                     "ts_ns": pl.Int64, "dur_ns": pl.Int64, "end_ns": pl.Int64,
                                     "busy_ns": pl.Int64, "busy_frac": pl.Float64})
        if data.gpu.height == 0 or self.window_ns <= 0:
            return empty
        t0 = self.facts.window[0]
        size = max(self.window_ns // WINDOWS, 1)
        busy = self.facts.busy
        # Split busy intervals at window edges: an interval spans windows [w0, w1].
        iv = busy.with_columns(((pl.col("start_ns") - t0) // size).alias("w0"),
                               ((pl.col("end_ns") - 1 - t0) // size).alias("w1"))
        iv = (iv.with_columns(pl.int_ranges("w0", pl.col("w1") + 1).alias("w")).explode("w")
              .with_columns((pl.col("w") * size + t0).alias("ws"))
              .with_columns((pl.min_horizontal("end_ns", pl.col("ws") + size)
                             - pl.max_horizontal("start_ns", "ws")).alias("busy_ns")))
        per = iv.group_by("device_id", "w").agg(pl.col("busy_ns").sum())
        grid = (busy.select("device_id").unique()
                .join(pl.DataFrame({"w": pl.arange(0, WINDOWS, eager=True).cast(pl.Int64)}),
                      how="cross"))
        # Int64 literals: an Int32 window length overflows past 2.1 s and the rule never fires.
        return (grid.join(per, on=["device_id", "w"], how="left")
                .select("device_id", pl.col("w").alias("window_index"),
                        (pl.col("w") * size + t0).alias("ts_ns"),
                        pl.lit(size, pl.Int64).alias("dur_ns"),
                        ((pl.col("w") + 1) * size + t0).alias("end_ns"),
                        pl.col("busy_ns").fill_null(0))
                .with_columns((pl.col("busy_ns") / pl.col("dur_ns")).alias("busy_frac"))
                .sort("device_id", "window_index"))


def _step_frame(steps) -> pl.DataFrame:
    """The window's steps (:class:`~zym.analysis.phases.Steps`) as rows: ``step``, ``ts_ns``,
    ``end_ns``."""
    return pl.DataFrame({"step": pl.int_range(steps.count, eager=True).cast(pl.Int64),
                         "ts_ns": steps.start_ns, "end_ns": steps.end_ns})


# Calls of one function in a step from which the function counts as called once per item
ITEM_MIN_CALLS = 4
# The frame below a call that says its run of a frame's calls is not split into repetitions
# (``Relations._frame_instances``' ``below``): the frame is not the user's own
WHOLE = np.iinfo(np.int64).max
# The instance ``Relations._item_loop`` gives a call after a loop inside one call of the
# function (no iteration's)
AFTER_LOOP = np.iinfo(np.int64).min
# The most functions called once per item found in one step, and how deep below the step
# function (in user frames, past the frame the step function called) they are looked for
ITEM_MAX_FUNCTIONS = 4
ITEM_MAX_DEPTH = 6


class ItemCalls:
    """The functions each step calls once per item (:meth:`Relations.item_calls`): ``table``,
    one row per step and function (``step``, ``item_node``: its stack node, ``item_function``:
    its label, ``item_loop``: whether its calls are the iterations of a loop inside one call
    of it (eBPF stacks: :func:`_loop_tails`), ``item_calls``: its calls in the step,
    ``item_launches``: the launches inside them, ``item_start_ns`` and ``item_end_ns``: the
    first call's first CUDA call's start and the last's end), and the CUDA calls inside those
    calls: ``call_idx`` (sorted), each one's call of the
    function (``instance``: ids that say which calls share one), its ``step`` and the
    function's stack node (``node``: the table's ``item_node``)."""

    SCHEMA: ClassVar[dict] = {"step": pl.Int64, "item_node": pl.Int64, "item_function": pl.String,
              "item_loop": pl.Boolean, "item_calls": pl.Int64, "item_launches": pl.Int64,
              "item_start_ns": pl.Int64, "item_end_ns": pl.Int64}

    def __init__(self, table: pl.DataFrame, call_idx: np.ndarray, instance: np.ndarray,
                 step: np.ndarray, node: np.ndarray) -> None:
        self.table, self.call_idx, self.instance = table, call_idx, instance
        self.step, self.node = step, node

    @classmethod
    def empty(cls) -> ItemCalls:
        z = np.zeros(0, np.int64)
        return cls(pl.DataFrame(schema=cls.SCHEMA), z, z, z, z)


def _span_starts(frame: pl.DataFrame, sp: pl.DataFrame) -> pl.Series:
    """Per call of ``frame`` (``_thread``, ``user_node``: the frame whose call is wanted,
    ``ts_ns``), the start of the latest span of ``sp`` (``instance_columns``) of that frame on
    that thread that has not ended before it; else ``-(row + 1)``, its row in ``frame``
    (:func:`zym.analysis.instances.enclosing_span_starts`, or an as-of join where the spans'
    groups and times do not fit its one int64 key)."""
    from .instances import enclosing_span_starts

    found = enclosing_span_starts(
        frame["_thread"].to_numpy(), frame["user_node"].fill_null(-1).to_numpy(),
        frame["ts_ns"].to_numpy(), *(sp[c].to_numpy() for c in sp.columns))
    if found is not None:
        return pl.Series("call_instance", found, dtype=pl.Int64)
    sp = sp.lazy().sort("inst_ts", "inst_end")
    # calls in time order (the call table's order) need no sort there and back: at x600
    # 1.6 -> 0.5 s and 1.3 -> 0.6 GB more than the calls
    ordered = frame["ts_ns"].is_sorted()
    left = frame.lazy() if ordered else frame.lazy().with_row_index("_r").sort("ts_ns")
    out = left.join_asof(sp, left_on="ts_ns", right_on="inst_ts",
                         by=["_thread", "user_node"], strategy="backward",
                         check_sortedness=False)
    row = pl.int_range(pl.len(), dtype=pl.Int64) if ordered else pl.col("_r").cast(pl.Int64)
    return ((out if ordered else out.sort("_r"))
            .select(pl.coalesce(pl.when(pl.col("inst_end") >= pl.col("ts_ns"))
                                .then("inst_ts"), -row - 1).alias("call_instance"))
            .collect().to_series())


def _split_at_first_line(ids: np.ndarray, anc, rows: np.ndarray, line: np.ndarray
                         ) -> np.ndarray:
    """Run ids (``ids``: calls in time order, -1 none) of calls through the frames at node
    ``rows`` (-1 none), each run split where the frame's executing ``line`` (its statement's
    first) goes back to the first (the lowest) its function, from that caller, issues CUDA
    calls from: a new call of it. Ids stay >= 0 and distinct per call of the function; -1
    stays."""
    from .instances import frame_codes

    if not len(ids):
        return ids
    has = (ids >= 0) & (rows >= 0)
    code = np.where(has, frame_codes(anc)[np.maximum(rows, 0)], -1)
    width = int(code.max(initial=0)) + 1
    first = np.full(width, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, code[has], line[has])
    at_first = has & (line == first[np.maximum(code, 0)])
    same_run = np.r_[False, (ids[1:] == ids[:-1]) & has[1:] & has[:-1]]
    back = at_first & same_run & ~np.r_[False, at_first[:-1]]
    start = has & (~same_run | back)
    return np.where(has, np.cumsum(start), -1).astype(np.int64)


def _loop_tails(run: np.ndarray, piece: np.ndarray, line: np.ndarray, min_pieces: int
                ) -> np.ndarray:
    """Per call (in time order; ``run``: its run of calls through one frame, ``piece``: its
    part of the run once split where the frame's line went back to its first, -1 none;
    ``line``: the frame's executing line): whether it is in the last part of a run of
    ``min_pieces`` parts or more, from that part's first call whose line no other part of the
    run has, to the run's end. Calls of a function back to back each go through the same
    lines; a loop inside one call of it (``for c, th in zip(cams, thetas): ...`` and then
    ``torch.cat(parts)``, ``self.embedder(crops)``) goes back to its first line as a new call
    would, and then runs the code after the loop: those calls are no iteration's."""
    n = len(run)
    tail = np.zeros(n, bool)
    if not n:
        return tail
    ok = (run >= 0) & (piece >= 0)
    begin = np.flatnonzero(np.r_[True, run[1:] != run[:-1]])
    end = np.r_[begin[1:], n] - 1
    no = np.cumsum(np.r_[True, run[1:] != run[:-1]]) - 1     # each call's run, 0..
    many = ok[begin] & (piece[end] - piece[begin] + 1 >= min_pieces)
    if not many.any():
        return tail
    last = ok & many[no] & (piece == piece[end][no])
    earlier = ok & many[no] & ~last
    width = int(line.max(initial=0)) + 2
    seen = np.unique(no[earlier] * width + line[earlier] + 1)
    key = no * width + line + 1
    pos = np.minimum(np.searchsorted(seen, key), len(seen) - 1)
    new = last & (seen[pos] != key)
    # from the first new line of the last part to the run's end
    count = np.cumsum(new)
    before = count[begin] - new[begin]
    return last & (count - before[no] > 0)


def _frame_levels(rows: np.ndarray, source: np.ndarray, user: np.ndarray, trie: Trie
                  ) -> list[np.ndarray]:
    """Per call (``rows``: its stack's trie row, -1 none), its frame at each level below the
    step function (NONE where it has none): the frame the step function called (``source``,
    by row: :func:`zym.analysis.phases.under_step`), then the outermost user frame
    (``user``, by row) below that, and so on, :data:`ITEM_MAX_DEPTH` levels at most."""
    at = np.maximum(rows, 0)
    levels = [np.where(rows >= 0, source[at], NONE)]
    level = source
    for _ in range(ITEM_MAX_DEPTH - 1):
        level = trie.outermost(user & (level != NONE) & (level != np.arange(len(level))))
        lv = np.where(rows >= 0, level[at], NONE)
        if not (lv >= 0).any():
            break
        levels.append(lv)
    return levels


def op_span_starts(spans, pid: np.ndarray, op_id: np.ndarray) -> np.ndarray:
    """Per (``pid``, ``op_id``) the start of that torch op's span in ``spans`` (the capture's
    :class:`~zym.analysis.load.SpanTable`: Kineto records one per op; its earliest where an
    op has more), else -1 (no span, or an op id that is null: pass int64 ids, -1 for none).
    Each found by a search in its process's sorted op ids (a hash join of millions of gaps
    with millions of ops took ~1 GB more at the x600 trace)."""
    out = np.full(len(op_id), -1, np.int64)
    if spans is None or not len(op_id):
        return out
    ops = pl.Series(op_id[op_id >= 0]).unique()
    starts = spans.collect(spans.lazy().filter(pl.col("op_id").is_in(ops.implode()))
                           .group_by("pid", "op_id").agg(pl.col("ts_ns").min().alias("op_ts"))
                           ).sort("pid", "op_id")
    for p, part in starts.group_by("pid", maintain_order=True):
        keys, ts = part["op_id"].to_numpy(), part["op_ts"].to_numpy()
        mine = np.flatnonzero((pid == p[0]) & (op_id >= 0))
        pos = np.minimum(np.searchsorted(keys, op_id[mine]), len(keys) - 1)
        hit = keys[pos] == op_id[mine]
        out[mine[hit]] = ts[pos[hit]]
    return out


def _item_label(labels: pl.Series, rows: np.ndarray, library: np.ndarray, parent: np.ndarray,
                loop: np.ndarray, first: np.ndarray, last: np.ndarray) -> pl.Series:
    """The label of each item function (``rows``: node rows): a library function's with
    the user function that calls it (``torch/nn/functional.py:5245 affine_grid (from
    facegate.py:334 embed)``: the library's own file says nothing of where the loop is); a
    loop inside one call of a function (``loop``), the lines of its CUDA calls (``first`` to
    ``last``) with the function (``the loop at facegate.py:354-356 in Service.embed``)."""
    own = labels.gather(rows)
    lib = library[rows] & (parent[rows] >= 0)
    caller = labels.gather(np.maximum(parent[rows], 0))
    span = pl.Series(np.where(first == last, first.astype(str),
                              np.char.add(np.char.add(first.astype(str), "-"),
                                          last.astype(str))))
    at_line = own.str.extract_groups(r"^(?<file>\S+):\d+ (?<name>.+)$")
    return (pl.DataFrame({"own": own, "caller": caller, "lib": lib, "loop": loop,
                          "span": span, "file": at_line.struct.field("file"),
                          "name": at_line.struct.field("name")})
            .select(pl.when(pl.col("loop") & pl.col("file").is_not_null())
                    .then(pl.format("the loop at {}:{} in {}", "file", "span", "name"))
                    .when(pl.col("lib")).then(pl.format("{} (from {})", "own", "caller"))
                    .otherwise(pl.col("own")).alias("item_function"))["item_function"])


def _library_entries(nodes: pl.DataFrame, trie: Trie, user: np.ndarray) -> np.ndarray:
    """Per stack node, whether it is a library's Python function called from user code that
    calls no user code itself (``F.grid_sample``, ``torchvision.ops.nms``; not a module's
    call, ``nn.Module: Sequential`` or torch's ``_call_impl``: a model's layers, each called
    once, are no items): the last frame a loop of the user's own code can be told by, where
    its body calls the library directly."""
    python = (nodes["kind"] == "python").fill_null(False).to_numpy()
    name, file = nodes["name"].fill_null(""), nodes["file"].fill_null("")
    # a module's call is no such function: a loop over a model's layers or stages
    # (``for stage in self.enc: x = stage(x)``) calls torch's module wrapper once a layer
    module = (name.str.starts_with("nn.Module: ")
              | ((_named(name, "_call_impl") | _named(name, "_wrapped_call_impl"))
                 & file.str.ends_with("torch/nn/modules/module.py"))).to_numpy()
    parent = trie.parent
    called_by_user = (parent >= 0) & user[np.maximum(parent, 0)]
    below = trie.subtree_sums(user.astype(np.int64)) - user   # user frames under each node
    return python & ~user & ~module & called_by_user & (below == 0)


def _loop_body_calls(levels: list[np.ndarray], free: np.ndarray, op: np.ndarray,
                     user: np.ndarray, library: np.ndarray, code: np.ndarray, rows: np.ndarray,
                     calls: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """The CUDA calls that may be a loop body's (:func:`_attach_loop_ops`' ``ops``), of the
    calls (``calls``: ``idx``, ``step``, ``ts``, ``end``, ``launch``; ``rows``: their stack
    nodes;
    ``levels``: their frames by level, :func:`_frame_levels`) not in an item (``free``): an
    op or built-in the step function ran itself (its node there), and, below each level's
    user frame (``user``, by node row), one that frame ran itself (the call's own node) or a
    library function it called (``library``: the function's node), with the calling frame's
    code as the parent."""
    idx, step, ts, end, launch = calls
    lv0 = levels[0]
    pick = [np.flatnonzero(free & (lv0 >= 0) & (op | library)[np.maximum(lv0, 0)])]
    group, parent = [lv0[pick[0]]], [np.full(len(pick[0]), -1, np.int64)]
    for above, lv in itertools.pairwise(levels):
        own = (lv < 0) & (above >= 0) & user[np.maximum(above, 0)] & (rows >= 0)
        lib = (lv >= 0) & library[np.maximum(lv, 0)] & (above >= 0)
        k = np.flatnonzero(free & (own | lib))
        pick.append(k)
        group.append(np.where(own[k], rows[k], lv[k]))
        parent.append(code[above[k]])
    k = np.concatenate(pick)
    return (idx[k], step[k], np.concatenate(group), ts[k], end[k], launch[k],
            np.concatenate(parent))


def _attach_loop_ops(table: pl.DataFrame, members: tuple[np.ndarray, ...],
                     ops: tuple[np.ndarray, ...]) -> tuple[pl.DataFrame, tuple[np.ndarray, ...]]:
    """The loop's own ops, made part of its items. Of ``ops`` (``at``, ``st``, ``node``,
    ``ts``, ``end``, ``launch``, ``parent``: calls of ops, built-ins or library functions the
    item function's caller ran itself (``parent``: the caller's frame code, the table's
    ``_parent``; -1: the step function), their steps, the group's node row (an op's, or the
    library function's), starts and ends, whether a launch: ``aten::mul`` at ``tracks[t].emb =
    F.normalize(0.9 * tracks[t].emb + 0.1 * emb[d])``, ``aten::to`` at ``model(torch
    .from_numpy(x).to(device))``, ``F.grid_sample`` after each ``F.affine_grid``), those of
    a group whose calls in a step come the same number of times (once or more) before each
    call of an item function of that step but the first, as many or more before the first,
    and never after its last; or else the same number of times after each call but the last,
    as many or more after the last: the loop body's, which a batched fix does once too. Each
    call's nearest as many join the function's call they come before (or after: its id and
    node, in ``members``: ``at``, ``inst``, ``st``, ``node``; the ids are span starts), their
    launches, start and end its row's (``table``, with ``_row``: each row's node row); the ones
    beyond (the step's own upload before the loop, its concatenation after) stay the step's.
    Returns the table and the members (``at``, ``inst``, ``st``, ``node``)."""
    at, inst, st, node = members
    o_at, o_st, o_node, o_ts, o_end, o_launch, o_parent = ops
    rows, t_step = table["_row"].to_numpy(), table["step"].to_numpy()
    if not len(o_at):
        return table, (at, inst, st, node)
    t_parent = table["_parent"].to_numpy()
    launches = table["item_launches"].to_numpy().copy()
    lo = table["item_start_ns"].to_numpy().copy()
    hi = table["item_end_ns"].to_numpy().copy()
    n_rows = int(rows.max()) + 1
    t_key = t_step * n_rows + rows
    t_order = np.argsort(t_key)
    joined_at, joined_inst, joined_st, joined_node = [at], [inst], [st], [node]
    used = np.zeros(len(o_at), bool)   # a group's calls in a step some function took
    for f in np.unique(rows):
        fm = np.flatnonzero(node == f)
        starts, first = np.unique(inst[fm], return_index=True)   # its calls, in time order
        f_step = st[fm][first]
        # the groups its caller called (the step function's own: before any function's)
        cand = np.flatnonzero(~used & np.isin(o_st, f_step)
                              & (np.isin(o_parent, t_parent[rows == f]) | (o_parent < 0)))
        cand = cand[np.lexsort((o_ts[cand], o_node[cand]))]   # by group, each in time order
        cuts = np.flatnonzero(o_node[cand][1:] != o_node[cand][:-1]) + 1
        for group in np.split(cand, cuts):
            for after in (False, True):
                if not len(group):
                    break
                move, ok = _loop_body(starts, f_step, o_ts[group], o_st[group], after)
                if not len(ok):
                    continue
                move = group[move]
                dst = t_order[np.searchsorted(t_key[t_order], o_st[move] * n_rows + f)]
                np.add.at(launches, dst, o_launch[move].astype(np.int64))
                np.minimum.at(lo, dst, o_ts[move])
                np.maximum.at(hi, dst, o_end[move])
                joined_at.append(o_at[move])
                j = np.searchsorted(starts, o_ts[move], side="right" if after else "left")
                joined_inst.append(starts[j - 1] if after else starts[j])
                joined_st.append(o_st[move])
                joined_node.append(np.full(len(move), f, np.int64))
                done = np.isin(o_st[group], ok)
                used[group[done]] = True
                group = group[~done]
    table = table.with_columns(pl.Series("item_launches", launches),
                               pl.Series("item_start_ns", lo), pl.Series("item_end_ns", hi))
    return table, tuple(np.concatenate(x) for x in (joined_at, joined_inst, joined_st,
                                                       joined_node))


def _loop_body(starts: np.ndarray, f_step: np.ndarray, o_ts: np.ndarray, o_st: np.ndarray,
               after: bool) -> tuple[np.ndarray, np.ndarray]:
    """Of one group's calls (``o_ts``, in time order, in steps ``o_st``) and one function's
    calls (their starts ``starts``, in time order, of steps ``f_step``): per step where every
    call of the function but the first (``after``: the last) has the same count m >= 1 of the
    group's calls nearest before it (after it: up to the next call), the first (last) m or
    more, and none comes after the last (before the first), the positions in ``o_ts`` of each
    call's nearest m, and those steps."""
    n = len(starts)
    if after:
        j = np.searchsorted(starts, o_ts, side="right") - 1   # the call each comes after
        valid = (j >= 0) & (f_step[np.maximum(j, 0)] == o_st)
    else:
        j = np.searchsorted(starts, o_ts, side="left")   # the call each comes before
        valid = (j < n) & (f_step[np.minimum(j, n - 1)] == o_st)
    count = np.bincount(j[valid], minlength=n)
    steps_u, where = np.unique(f_step, return_inverse=True)
    opens = np.r_[True, f_step[1:] != f_step[:-1]]
    closes = np.r_[f_step[1:] != f_step[:-1], True]
    edge = closes if after else opens      # the call whose count may be larger
    c_min = np.full(len(steps_u), np.iinfo(np.int64).max)
    c_max = np.zeros(len(steps_u), np.int64)
    np.minimum.at(c_min, where[~edge], count[~edge])
    np.maximum.at(c_max, where[~edge], count[~edge])
    fits = (c_min == c_max) & (c_min >= 1) & (count[edge] >= c_min)
    ok = steps_u[fits & ~np.isin(steps_u, np.unique(o_st[~valid]))]
    if not len(ok):
        return np.zeros(0, np.int64), ok
    m = np.where(fits, c_min, 0)[where]            # per call of the function
    k = np.flatnonzero(valid)                      # the group's calls with a call (j: in order)
    nth = np.arange(len(k)) - np.searchsorted(j[k], j[k], side="left")   # 0: the earliest
    if after:
        near = nth < m[j[k]]                        # each call's first m after it
    else:
        near = count[j[k]] - nth <= m[j[k]]         # each call's last m before it
    take = np.zeros(len(o_ts), bool)
    take[k[near]] = True
    return np.flatnonzero(take & np.isin(o_st, ok)), ok


def _top_per_step(step: np.ndarray, node: np.ndarray, mask: np.ndarray, n_nodes: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per step, of the calls ``mask`` marks with a ``node`` (>= 0, below ``n_nodes``), the
    node most of them have (ties: the lower node): the steps and their nodes."""
    m = mask & (node >= 0)
    key = np.sort(step[m].astype(np.int64) * n_nodes + node[m])
    if not len(key):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    count = np.diff(np.r_[first, len(key)])
    k = key[first]
    s, n = k // n_nodes, k % n_nodes
    order = np.lexsort((n, -count, s))
    so = s[order]
    pick = order[np.r_[True, so[1:] != so[:-1]]]
    return s[pick], n[pick]


def _named(name: pl.Series, function: str) -> pl.Series:
    """Whether each frame ``name`` is ``function``'s: the name itself, or a qualified name
    ending in it (``Class.function``)."""
    return (name == function) | name.str.ends_with("." + function)


def _inside_another_module(nodes: pl.DataFrame, trie) -> np.ndarray:
    """Per stack node, whether it runs inside a module's call other than its own: more
    module wrappers above it (``nn.Module: X`` frames, torch's ``_call_impl``: the most of
    the two counts) than its own call's, where it is a module's ``forward``. A frame's name
    is its function's (torch.profiler: ``_call_impl``, ``forward``) or, from Python 3.11's
    code objects, its qualified name (eBPF: ``Module._call_impl``, ``ResBlock.forward``)."""
    name, file = nodes["name"].fill_null(""), nodes["file"].fill_null("")
    impl = (_named(name, "_call_impl")
            & file.str.ends_with("torch/nn/modules/module.py")).to_numpy()
    parent = trie.parent
    forward = (_named(name, "forward").to_numpy()
               & (impl[np.maximum(parent, 0)] & (parent >= 0)
                  | nodes["module"].is_not_null().to_numpy()))
    best = np.zeros(len(name), np.int64)
    for mark in (name.str.starts_with("nn.Module: ").to_numpy(), impl):
        above = trie.count_above(mark)
        best = np.maximum(best, above - (forward & (above > 0)))
    return best > 0


def _read_between(step: np.ndarray, inst: np.ndarray, ts: np.ndarray, end: np.ndarray,
                  scalar_ts: np.ndarray, read_ts: np.ndarray, upload_ts: np.ndarray
                  ) -> np.ndarray:
    """The steps (of the CUDA calls ``ts``..``end`` inside each call ``inst`` of a function,
    in ``step``, on one thread, in time order) whose loop reads the GPU's values back
    between its calls, as a loop whose next call needs the last one's output does: between
    at least half of the function's consecutive calls, a scalar read (``scalar_ts``: a stop
    check), or a read back (``read_ts``: device-to-host copies) with no upload
    (``upload_ts``: host-to-device copies, a next item's input)."""
    if not len(step) or not (len(scalar_ts) or len(read_ts)):
        return np.zeros(0, np.int64)
    # each call of the function: its first CUDA call's start and its last one's end (the
    # calls are in time order: a call's CUDA calls are one run)
    first = np.r_[True, (inst[1:] != inst[:-1]) | (step[1:] != step[:-1])]
    starts = np.flatnonzero(first)
    c_step, c_ts, c_end = step[starts], ts[starts], np.maximum.reduceat(end, starts)
    gap = np.flatnonzero(c_step[1:] == c_step[:-1])   # a call and the next in its step
    if not len(gap):
        return np.zeros(0, np.int64)
    after, before, g_step = c_end[gap], c_ts[gap + 1], c_step[gap]

    def holds(at: np.ndarray) -> np.ndarray:
        at = np.sort(at)
        return (np.searchsorted(at, before, side="left")
                > np.searchsorted(at, after, side="right"))

    reads = holds(scalar_ts) | (holds(read_ts) & ~holds(upload_ts))
    steps, where = np.unique(g_step, return_inverse=True)
    share = np.bincount(where, weights=reads) / np.bincount(where)
    return steps[share >= 0.5].astype(np.int64)


def _on_steps_thread(calls: pl.DataFrame, steps) -> np.ndarray:
    """Positions of ``calls`` made on the steps' thread, in time order."""
    return np.flatnonzero(calls["_thread"].to_numpy() == steps.thread)


def _overlap(frame: pl.DataFrame, busy: pl.DataFrame) -> pl.Series:
    """Per row of ``frame`` (``ts_ns``, ``end_ns``), the busy time (any device) inside it."""
    import numpy as np

    if busy.height == 0 or frame.height == 0:
        return pl.Series([0] * frame.height, dtype=pl.Int64)
    b = busy.sort("start_ns")
    s, e = b["start_ns"].to_numpy(), b["end_ns"].to_numpy()
    # Busy time before t, as a piecewise-linear cumulative function, evaluated at both ends.
    cum = np.concatenate([[0], np.cumsum(e - s)])

    def before(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(s, t, side="right")  # intervals starting at or before t
        full = cum[np.maximum(k - 1, 0)]
        last = np.where(k > 0, np.clip(t - s[np.maximum(k - 1, 0)], 0,
                                       (e - s)[np.maximum(k - 1, 0)]), 0)
        return np.where(k > 0, full + last, 0)

    lo, hi = frame["ts_ns"].to_numpy(), frame["end_ns"].to_numpy()
    return pl.Series(before(hi) - before(lo), dtype=pl.Int64)


def _every_row(at: np.ndarray, n: int) -> bool:
    """Whether the positions ``at`` are ``0..n-1`` in order (every row: no gather needed)."""
    return len(at) == n and (not n or (at[0] == 0 and bool((at[1:] - at[:-1] == 1).all())))


# Per-call text columns, gathered from the call table (by ``call_idx``) only for the rows a
# rule's other conditions kept: torch op shapes and dtypes are long strings.
DEFERRED = ("op_id", "op_shapes", "op_dtypes", "dtype")


def deferred_columns(rel: Relations, names: set[str]) -> list[pl.Expr]:
    """Expressions gathering per-call text columns by ``call_idx`` (see ``DEFERRED``): two
    gathers, so text moves only for the rows the expression runs on."""
    calls = rel.calls_table()
    raw = conformed(rel.analysis.data, "call")
    orig = pl.lit(calls["_orig"]).gather(pl.col("call_idx"))
    exprs = [pl.lit(raw["op_id"]).gather(orig).alias("op_id")] if "op_id" in names else []
    for c in ("op_shapes", "op_dtypes"):  # (held as codes: text for the rows gathered)
        if c in names:
            exprs.append(pl.lit(raw[c]).gather(orig).cast(pl.String).alias(c))
    if "dtype" in names:
        exprs.append(pl.lit(raw["op_dtypes"]).gather(orig).cast(pl.String)
                     .str.extract(r'^\[\s*"([^"]*)"', 1).alias("dtype"))
    return exprs
