"""Call sites: for every stack node, the line a finding points at and how to name it.

The *site* of a CUDA call is the innermost user (non-framework) frame above it: the line to
change. :func:`site_table` derives, per distinct stack node (thousands, however many events),
that frame, the torch ops and Python built-in above the call, the source text of the line
where the capture stored it, and the Python mechanism the line uses (``.item()``, ``.cpu()``,
...). :func:`site_label` is the one way a site is written, in text, JSON, HTML and exports.
"""
from __future__ import annotations

import re

import polars as pl

from .trie import Trie, take_rows, values_at

# Python mechanisms that move data or synchronize, recognised in the source text of a line.
# First match wins: ``x.cpu().item()`` is a scalar read. Each is (label, regex).
MECHANISMS: tuple[tuple[str, str], ...] = (
    (".item()", r"\.item\(\s*\)"),
    (".tolist()", r"\.tolist\(\s*\)"),
    (".numpy()", r"\.numpy\(\s*\)"),
    (".cpu()", r"\.cpu\(\s*\)"),
    ('.to("cpu")', r"""\.to\(\s*(?:device\s*=\s*)?['"]cpu['"]"""),
    ("torch.cuda.synchronize()", r"torch\.cuda\.synchronize\("),
    (".synchronize()", r"\.synchronize\(\s*\)"),
    ("torch.tensor(..., device=)", r"torch\.(?:as_)?tensor\(.*device\s*="),
    (".cuda()", r"\.cuda\(\s*\)"),
    (".to(device)", r"\.to\("),
    ("print(tensor)", r"\bprint\("),
    ("bool(tensor)", r"\bbool\("),
    ("int()/float() of a tensor", r"\b(?:int|float)\("),
    ("if <tensor>:", r"^\s*(?:if|elif|while|assert)\b"),
)
# Torch ops whose output size depends on the tensor's values: on CUDA, PyTorch copies the size
# to the host and waits for the GPU (a device-to-host copy and a stream sync) on every call.
# Boolean-mask indexing (``x[mask]``, ``aten::index``) and ``torch.where(cond)`` go through
# ``aten::nonzero``. ``aten::bincount`` reads its maximum with ``aten::item`` (a scalar read).
SIZE_OPS: tuple[str, ...] = (
    "aten::nonzero", "aten::nonzero_numpy", "aten::argwhere", "aten::masked_select",
    "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
    "aten::unique_dim_consecutive", "aten::repeat_interleave", "aten::masked_scatter",
)
_SIZE_OP = ";(" + "|".join(re.escape(op) for op in SIZE_OPS) + ");"
# Packages inside an installed tree are shown from the package down.
_INSTALLED = re.compile(r"^.*/(?:site-packages|dist-packages)/")


def mechanism_of(source: pl.Expr) -> pl.Expr:
    """Expression: the first :data:`MECHANISMS` label whose pattern matches ``source``."""
    expr = pl.lit(None, pl.String)
    for label, pattern in reversed(MECHANISMS):
        expr = pl.when(source.str.contains(pattern)).then(pl.lit(label)).otherwise(expr)
    return expr


def short_paths(files: pl.Series) -> dict[str, str]:
    """Each file as users read it: installed packages from the package down, other files
    relative to the deepest folder they all share (a one-folder workload: the bare name)."""
    names = [f for f in files.drop_nulls().unique().to_list() if f]
    local = [f for f in names if not _INSTALLED.match(f) and f.startswith("/")]
    root = ""
    if local:
        parts = [f.split("/")[:-1] for f in local]
        common = parts[0]
        for p in parts[1:]:
            n = 0
            while n < min(len(common), len(p)) and common[n] == p[n]:
                n += 1
            common = common[:n]
        root = "/".join(common) + "/" if common else ""
    out = {}
    for f in names:
        m = _INSTALLED.match(f)
        out[f] = f[m.end():] if m else (f[len(root):] if root and f.startswith(root) else f)
    return out


def own_code_caller(frames: list[dict]) -> str | None:
    """Where a site lies inside an installed package (transformers, vllm...: its exact line is
    the package's), the innermost frame of the user's own code above it, as ``file:line
    function`` (the file relative to the folder its own-code frames share, as sites are);
    None where the site is the user's own code or nothing of theirs calls it. ``frames``: the
    user frames of the site's path, outermost first (``file``, ``line``, ``name``)."""
    if not frames or not _INSTALLED.match(frames[-1].get("file") or ""):
        return None
    own = [f for f in frames if f.get("file") and not _INSTALLED.match(f["file"])]
    if not own:
        return None
    short = short_paths(pl.Series([f["file"] for f in own]))
    f = own[-1]
    return f"{short.get(f['file'], f['file'])}:{f['line']} {f['name']}"


# The label of a site without a user frame (no Python line above its calls).
NO_USER_FRAME = "(no user frame)"


def site_label(function: str | None, file: str | None, line: int | None,
               module: str | None = None, fallback: str = NO_USER_FRAME) -> str:
    """``file:line function``; ``Module.forward`` inside an ``nn.Module``; ``fallback`` when
    there is no user frame."""
    if function is None:
        return fallback
    if module and function == "forward":
        function = f"{module}.forward"
    return f"{file}:{line} {function}" if line is not None else f"{file} {function}"


def site_label_expr(prefix: str = "user_", fallback: str = NO_USER_FRAME) -> pl.Expr:
    """:func:`site_label` as an expression over ``{prefix}function/_short_file/line/module``."""
    fn = pl.col(f"{prefix}function")
    shown = (pl.when((pl.col(f"{prefix}module").is_not_null()) & (fn == "forward"))
             .then(pl.col(f"{prefix}module") + ".forward").otherwise(fn))
    line = pl.col(f"{prefix}line").cast(pl.String)
    where = pl.when(line.is_null()).then(pl.col(f"{prefix}short_file")).otherwise(
        pl.col(f"{prefix}short_file") + ":" + line)
    return pl.when(fn.is_null()).then(pl.lit(fallback)).otherwise(where + " " + shown)


def site_table(nodes: pl.DataFrame) -> pl.DataFrame:
    """Per stack node (``stack_id``): ``site_id`` and the site's user frame (``user_*``, with
    ``user_short_file``, ``user_source`` and ``site``, its label), torch ops and the innermost
    Python built-in above it, the Python ``mechanism`` of the line, and ``code_site``: one id per
    distinct (user frame file/line/function, torch op chain, built-in), shared by call paths
    that reach the same code from different callers.

    The work scales with distinct stack nodes, not with events.
    """
    parts = pl.col("name").str.extract_groups(r"^<built-in (?P<how>method|function) (?P<fn>\w+)")
    builtin = pl.when(parts.struct.field("how") == "method").then(
        pl.lit(".") + parts.struct.field("fn")).otherwise(parts.struct.field("fn"))
    base = nodes.select(
        "stack_id", "parent_id", "depth", "kind", "user_node", "op_node", "user_module",
        pl.when(pl.col("kind") == "torch_op").then(pl.col("name")).alias("_op"),
        pl.when(pl.col("kind") == "native").then(builtin).alias("_builtin"),
        ((pl.col("kind") == "native") & pl.col("file").is_not_null()).fill_null(False)
        .alias("_unwound"))
    # Inherited top-down, one array pass per depth level over the distinct stack nodes.
    trie = Trie.of(base)
    # the nearest node that is not an unwound native frame (one with its library): the native
    # path between the Python line (or torch op) and the API makes no site of its own
    kept = trie.nearest(~base["_unwound"].to_numpy())
    above = take_rows(kept, trie.parent)
    api = trie.nearest(base["_builtin"].is_not_null().to_numpy())
    chain = pl.DataFrame({
        "stack_id": base["stack_id"],
        "op_chain": _closed(trie.joined(base["_op"].is_not_null().to_numpy(), base["_op"])),
        "py_api": values_at(base["_builtin"], api)})
    base = base.with_columns(values_at(base["stack_id"], above).alias("_anchor"))
    site_id = (pl.when(pl.col("kind") == "cuda_api")
               .then(pl.coalesce("_anchor", "parent_id", "stack_id"))
               .otherwise("stack_id"))
    source = pl.col("source") if "source" in nodes.columns else pl.lit(None, pl.String)
    short = short_paths(nodes.filter(pl.col("is_user"))["file"]) if "is_user" in nodes.columns \
        else {}
    frames = nodes.select(pl.col("stack_id").alias("user_node"), pl.col("name").alias("user_function"),
                          pl.col("file").alias("user_file"), pl.col("line").alias("user_line"),
                          source.alias("user_source"))
    ops = nodes.select(pl.col("stack_id").alias("op_node"), pl.col("name").alias("torch_op"))
    site = (base.select("stack_id", site_id.alias("site_id"))
            .join(base.select(pl.col("stack_id").alias("site_id"), "user_node", "op_node",
                              "user_module"), on="site_id", how="left")
            .join(chain.rename({"stack_id": "site_id"}), on="site_id", how="left")
            .join(frames, on="user_node", how="left")
            .join(ops, on="op_node", how="left").drop("op_node"))
    site = site.with_columns(
        pl.col("user_file").replace_strict(short, default=pl.col("user_file"),
                                           return_dtype=pl.String).alias("user_short_file"),
        pl.coalesce(pl.col("py_api").str.replace(r"^(\.\w+)$", "$1()"),
                    mechanism_of(pl.col("user_source"))).alias("mechanism"),
        pl.col("op_chain").str.extract(_SIZE_OP, 1).alias("size_op"))
    # The code site: same line, same torch ops, same built-in, whatever the callers above.
    key = pl.concat_str([pl.col(c).cast(pl.String).fill_null("") for c in (
        "user_file", "user_line", "user_function", "user_module", "op_chain", "py_api")],
        separator="\x1f")
    return site.with_columns(key.rank("dense").cast(pl.Int64).alias("code_site"),
                             site_label_expr().alias("site"))


def site_frames(nodes: pl.DataFrame) -> pl.DataFrame:
    """Per stack node (``stack_id``), ``frames``: every Python frame at or above it, outermost
    first, as ``;file:function;...;`` (``""`` where there is none). Built only where a rule
    reads it: the text grows with depth times distinct stacks (~0.2 GB at 400 k nodes)."""
    py = pl.when(pl.col("kind") == "python").then(
        pl.concat_str(pl.col("file").fill_null("?"), pl.lit(":"), pl.col("name")))
    base = nodes.select("stack_id", "parent_id", "depth", py.alias("_py"))
    frames = Trie.of(base).joined(base["_py"].is_not_null().to_numpy(), base["_py"])
    return pl.DataFrame({"stack_id": base["stack_id"], "frames": _closed(frames)})


def _closed(chain: pl.Series) -> pl.Series:
    """``;a;b`` as ``;a;b;`` (a rule's pattern ``;a;`` then matches any whole element);
    ``""`` stays ``""``."""
    return pl.select(pl.when(chain == "").then(pl.lit("")).otherwise(chain + ";")
                     .alias(chain.name)).to_series()

