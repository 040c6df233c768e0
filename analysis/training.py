"""Facts of a service that serves in training mode: torch ops autograd recorded (grad mode on:
no ``torch.inference_mode()``/``torch.no_grad()``), modules that still run as in training (no
``model.eval()``: dropout draws masks, batch norm normalises by the batch's own statistics
and updates its running ones), and a backward pass (a training capture, where both belong).

Autograd's records come from the spans' ``op_seq`` (Kineto's ``Sequence number``); dropout
from the torch ops above each kernel (``op_chain``), or the kernel's name where the capture
names no op (eBPF stacks without the torch op frames); batch norm's training work from its
kernels' names and the module the launch ran in; a backward pass from the spans' op names
(the autograd engine's, or a ``...Backward`` node's).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

if TYPE_CHECKING:
    from .report import Analysis

# CPU time autograd's recording adds to each torch op it records (an op span with a sequence
# number): the loop of small ops of bench/whatif/autograd_cost.py (linear, GELU, layer norm,
# add; trained weights, an input that needs no grad) on the H100 host, autograd on against
# torch.inference_mode(): 856 ns per traced op, half of them recorded (1,713 ns each); against
# torch.no_grad() 714 ns (1,428). bench/whatif/results/h100-grad/autograd_cost.json.
AUTOGRAD_NS_PER_OP = 1_713
# Torch ops that draw a dropout mask (a module in training mode; in eval mode ``aten::dropout``
# returns its input and launches nothing), in ``op_chain``'s ';op;...;' form: the unfused
# forms' Bernoulli draws run under one of these too (a Bernoulli draw alone is a service's
# own sampling, not dropout).
DROPOUT_CHAIN = r";aten::(?:native_dropout|_?fused_dropout|(?:feature_)?(?:alpha_)?dropout);"
# ... and the kernels' names where no op is known (PyTorch's fused dropout kernel).
DROPOUT_KERNEL = r"(?i)fused_dropout|dropout_kernel"
# Batch norm in training mode: PyTorch's kernels that gather the batch's statistics (eval mode
# reads the running ones instead, with one small kernel that update_stats' stands for here),
# and the running-statistics counter (num_batches_tracked += 1: an add_ in a BatchNorm
# module); removed by the estimate. cuDNN's batch norm does all of it in one kernel
# (bn_fw_tr_... in training, bn_fw_inf_... in eval): found, not removed (what its eval-mode
# kernel takes is not known here).
BN_STATS_KERNEL = r"batch_norm_collect_statistics|batch_norm_reduce_statistics"
BN_FUSED_TRAIN_KERNEL = r"bn_fw_tr_"
BN_MODULE = r"BatchNorm"
BN_COUNTER_OP = "aten::add_"
# An op of the backward pass: the autograd engine's node evaluation, or a node's own name.
BACKWARD_OP = r"^autograd::engine::evaluate_function|Backward\d*$"


def op_counts(analysis: Analysis, start_ns: np.ndarray, end_ns: np.ndarray) -> pl.DataFrame:
    """Per interval ``[start_ns[i], end_ns[i])`` (sorted, not overlapping: the steps), the
    torch op spans that start in it (``torch_ops``), those autograd recorded (``grad_ops``)
    and those of a backward pass (``backward_ops``): ``step`` (the interval's index) and the
    three counts, for the intervals with ops. One query of the op spans between the first
    start and the last end, counted per interval and stack as it is read; a backward op is
    one whose stack node names one (:data:`BACKWARD_OP`); none without spans."""
    schema = {"step": pl.Int64, "torch_ops": pl.Int64, "grad_ops": pl.Int64,
              "backward_ops": pl.Int64}
    spans = analysis.data.span_table
    if spans is None or not len(start_ns) or "op_id" not in spans.columns:
        return pl.DataFrame(schema=schema)
    grad = (pl.col("op_seq").is_not_null() if "op_seq" in spans.columns else pl.lit(False))
    starts, ends = pl.lit(pl.Series(start_ns)), pl.lit(pl.Series(end_ns))
    got = spans.collect(spans.lazy().filter(
        pl.col("op_id").is_not_null() & (pl.col("ts_ns") >= int(start_ns[0]))
        & (pl.col("ts_ns") < int(end_ns[-1])))
        .select("ts_ns", "stack_id", grad.alias("grad"))
        .with_columns((starts.search_sorted(pl.col("ts_ns"), side="right").cast(pl.Int64) - 1)
                      .alias("step"))
        .filter(pl.col("ts_ns") < ends.gather(pl.col("step")))
        .group_by("step", "stack_id").agg(pl.len().alias("n"), pl.col("grad").sum().alias("g")))
    if got.height == 0:
        return pl.DataFrame(schema=schema)
    nodes = analysis.facts.nodes  # (every stack node, the spans' too: the op's own frame)
    backward = nodes.filter((pl.col("kind") == "torch_op")
                            & pl.col("name").str.contains(BACKWARD_OP))["stack_id"]
    return (got.group_by("step").agg(
        pl.col("n").sum().alias("torch_ops"), pl.col("g").sum().alias("grad_ops"),
        pl.col("n").filter(pl.col("stack_id").is_in(backward.implode())).sum()
        .alias("backward_ops")).cast(schema))


def grad_ops_before_calls(analysis: Analysis) -> np.ndarray:
    """Per call of the window (``Facts.calls`` order), the torch ops autograd recorded that
    started on its thread in the CPU time before it (after the thread's previous call
    started: :class:`~zym.analysis.replay.GapCounter`)."""
    from .replay import GapCounter

    calls = analysis.facts.calls
    out_len = calls.height
    spans = analysis.data.span_table
    if spans is None or "op_seq" not in spans.columns or not out_len:
        return np.zeros(out_len, np.int64)
    t0, t1 = analysis.window
    counter = GapCounter(calls)
    counter.add(spans.collect(spans.lazy().filter(
        pl.col("op_seq").is_not_null() & (pl.col("ts_ns") >= t0) & (pl.col("ts_ns") < t1))
        .select("pid", "tid", "ts_ns")))
    return counter.total


def train_mode_kernels(analysis: Analysis) -> pl.DataFrame:
    """Per GPU operation (``Facts.gpu`` rows): ``found``, a kernel a module runs only in
    training mode (dropout: a dropout op above it, :data:`DROPOUT_CHAIN`, or, where the
    capture names no op above it, a dropout kernel's name, :data:`DROPOUT_KERNEL`; batch
    norm's statistics, its counter, cuDNN's training kernel), and ``removable``, those eval
    mode does without (all but cuDNN's, whose eval-mode form is another kernel). Judged once
    per distinct stack and kernel name, once per analysis (the steps relation and the
    estimate read it)."""
    return analysis.relations.shared("train_mode_kernels",
                                     lambda: _train_mode_kernels(analysis))


def _train_mode_kernels(analysis: Analysis) -> pl.DataFrame:
    from zym.schemas.lookup import first_row_of

    gpu = analysis.facts.gpu
    stacks = gpu["stack_id"].drop_nulls().unique()
    chain, op = (c.cast(pl.String) for c in analysis.relations.site_of(
        stacks, ("op_chain", "torch_op")))
    nodes = analysis.facts.nodes
    module = nodes["module"].gather(first_row_of(nodes["stack_id"], stacks)).cast(pl.String)
    named = chain.is_not_null() & (chain != "")
    dropout_op = stacks.filter(named & chain.str.contains(DROPOUT_CHAIN).fill_null(False))
    unnamed = stacks.filter(~named.fill_null(False))
    counter = stacks.filter((op == BN_COUNTER_OP).fill_null(False)
                            & module.str.contains(BN_MODULE).fill_null(False))
    names = gpu["name"].unique().drop_nulls().cast(pl.String)

    def named_like(pattern: str) -> pl.Series:
        return names.filter(names.str.contains(pattern))

    dropout_name, stats, fused_name = (named_like(p) for p in (
        DROPOUT_KERNEL, BN_STATS_KERNEL, BN_FUSED_TRAIN_KERNEL))
    if not (len(dropout_op) or len(counter) or len(stats) or len(fused_name)
            or (len(unnamed) and len(dropout_name))):  # (a service in eval mode: no row read)
        none = pl.repeat(False, gpu.height, dtype=pl.Boolean, eager=True)
        return pl.DataFrame({"found": none, "removable": none})
    stack, name = pl.col("stack_id"), pl.col("name").cast(pl.String)
    fused = name.is_in(fused_name.implode())
    found = (stack.is_in(dropout_op.implode())
             | (stack.is_in(unnamed.implode()) & name.is_in(dropout_name.implode()))
             | name.is_in(stats.implode()) | stack.is_in(counter.implode()) | fused)
    kernel = pl.col("kind") == "kernel"
    return gpu.select((kernel & found).fill_null(False).alias("found"),
                      (kernel & found & ~fused).fill_null(False).alias("removable"))


def train_mode_launches(analysis: Analysis, steps: np.ndarray) -> pl.DataFrame:
    """The calls (``call_idx``) that launched the removable training-mode kernels of the
    window's ``steps`` (:func:`train_mode_kernels`), and the CPU time each spent inside its
    torch op before it (``in_op_ns``: from the op's span, 0 without spans): what the work
    costs the CPU besides its launch."""
    rel = analysis.relations
    call_idx = (analysis.facts.gpu["call_idx"].filter(train_mode_kernels(analysis)["removable"])
                .drop_nulls().cast(pl.Int64))
    step = rel.call_steps().gather(call_idx)
    call_idx = call_idx.filter(step.is_in(pl.Series(steps).implode()).fill_null(False)).unique()
    calls = analysis.facts.calls
    out = pl.DataFrame({"call_idx": call_idx.sort(),
                        "in_op_ns": pl.repeat(0, len(call_idx), dtype=pl.Int64, eager=True)})
    spans = analysis.data.span_table
    op_id = calls["op_id"].gather(out["call_idx"]) if "op_id" in calls.columns else None
    if spans is None or op_id is None or op_id.null_count() == len(op_id):
        return out
    from .relations import op_span_starts

    ts = calls["ts_ns"].gather(out["call_idx"]).to_numpy()
    at = op_span_starts(spans, calls["pid"].gather(out["call_idx"]).to_numpy(),
                        op_id.fill_null(-1).cast(pl.Int64).to_numpy())
    before = np.where(at >= 0, np.clip(ts - at, 0, None), 0)
    return out.with_columns(pl.Series("in_op_ns", before, dtype=pl.Int64))
