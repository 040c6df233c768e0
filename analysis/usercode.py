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
