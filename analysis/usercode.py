"""Which frames are the user's code, as opposed to the framework's.

A profile should point at the line the user can change: the innermost frame that is neither
the standard library, nor torch and its companions, nor code a compiler generated
(torch.compile's Inductor output, Triton launchers), nor a C built-in. Paths arrive in two forms:
absolute (eBPF captures: ``/usr/lib/python3.12/site-packages/torch/nn/modules/module.py``) and
relative to a ``sys.path`` entry (Kineto: ``torch/nn/modules/module.py``); both are handled.
"""
from __future__ import annotations

import re
import sys

import polars as pl

# Top-level packages whose frames are never "the user's line". Model code that ships as a
# library (transformers, vllm) stays user code on purpose: that is where users fix things.
FRAMEWORK_PACKAGES: frozenset[str] = frozenset({
    "torch", "torchvision", "torchaudio", "functorch", "triton", "numpy", "typing_extensions",
    "_pytest", "pytest", "pluggy", "importlib_metadata", "zym",
}) | frozenset(sys.stdlib_module_names)


# Code that compilers generate is the framework's too, whatever its path: the user's line is
# the one that called the compiled module. TorchInductor writes its kernels and wrappers under
# a cache folder named torchinductor_<user> (TORCHINDUCTOR_CACHE_DIR may move it, keeping the
# name for the default); Triton's launchers live in its own cache; torch.fx names generated
# forwards <eval_with_key>.N (caught by the leading "<").
GENERATED = (r"/torchinductor_[^/]*/", r"/\.triton/cache/", r"/inductor_cache/")


def framework_file_pattern(packages: frozenset[str] = FRAMEWORK_PACKAGES) -> str:
    """A regex matching source files of the standard library, of ``packages`` and of code
    that compilers generated (``GENERATED``)."""
    names = "|".join(sorted(re.escape(p) for p in packages))
    return (
        r"^<"  # <frozen importlib._bootstrap>, <string>, <eval_with_key>.3
        + "".join(f"|{g}" for g in GENERATED) +
        r"|/lib/python3\.\d+/(?:[^/]+\.py$|(?:" + names + r")/)"  # an installed stdlib
        r"|(?:^|/)(?:site-packages|dist-packages)/(?:" + names + r")(?:/|\.py$)"
        r"|^(?:" + names + r")(?:/|\.py$)"  # relative to a sys.path entry, as Kineto writes
    )


def is_user_frame(packages: frozenset[str] = FRAMEWORK_PACKAGES) -> pl.Expr:
    """Expression over the frame table: a Python frame with a file outside the framework."""
    return ((pl.col("kind") == "python") & pl.col("file").is_not_null()
            & ~pl.col("file").str.contains(framework_file_pattern(packages)))


# A function torch.compile compiled runs as Dynamo's rewrite of its frame: that frame calls the
# compiled graph (AOT autograd, Inductor) from its first line, and Dynamo called it (through
# nn.Module's call wrappers). Its line says nothing; the user's line is the caller's.
DYNAMO_CALLER = r"(?:^|/)torch/_dynamo/eval_frame\.py$"
MODULE_WRAPPER = r"(?:^|/)torch/nn/modules/module\.py$"
KINETO_MODULE = "nn.Module: "  # a frame torch.profiler adds per module call (no file)
COMPILED_RUNTIME = r"(?:^|/)torch/_(?:dynamo|functorch|inductor)/"


def compiled_frames(nodes: pl.DataFrame, hops: int = 8) -> pl.Series:
    """Per stack node (``stack_id, parent_id, file, name`` and ``is_user``): the user frames that are
    a compiled function running its compiled graph: called by Dynamo (``eval_frame.py``, past
    at most ``hops`` nn.Module wrapper frames) and calling into its runtime
    (``torch/_dynamo``, ``_functorch``, ``_inductor``). A graph break's own lines in the same
    function call torch ops, not the runtime, and stay the user's."""
    import numpy as np

    idx = {"stack_id": nodes["stack_id"]}
    row_of = pl.DataFrame(idx).with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    file = pl.col("file").fill_null("")
    flags = nodes.select(
        nodes.select("parent_id").join(row_of.rename({"stack_id": "parent_id"}), on="parent_id",
                                       how="left", maintain_order="left")["row"]
        .fill_null(-1).alias("up"),
        (file.str.contains(MODULE_WRAPPER)  # (and Kineto's "nn.Module: Name" frames)
         | (pl.col("file").is_null() & pl.col("name").str.starts_with(KINETO_MODULE)
            .fill_null(False))).alias("wrapper"),
        file.str.contains(DYNAMO_CALLER).alias("dynamo"),
        file.str.contains(COMPILED_RUNTIME).alias("runtime"), pl.col("is_user").fill_null(False))
    # The walk over the (small) node table in numpy: -1 is "no caller".
    up, is_wrapper = flags["up"].to_numpy(), flags["wrapper"].to_numpy()
    caller = up
    for _ in range(hops):  # past nn.Module's __call__ wrappers
        at = np.maximum(caller, 0)
        caller = np.where((caller >= 0) & is_wrapper[at], up[at], caller)
    called_by_dynamo = (caller >= 0) & flags["dynamo"].to_numpy()[np.maximum(caller, 0)]
    calls_runtime = np.zeros(nodes.height, bool)
    runtime_callers = up[flags["runtime"].to_numpy()]
    calls_runtime[runtime_callers[runtime_callers >= 0]] = True
    return pl.Series("is_user", flags["is_user"].to_numpy() & called_by_dynamo & calls_runtime)
