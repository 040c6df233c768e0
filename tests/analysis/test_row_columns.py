"""The calls' and GPU operations' row columns (``call_idx``, ``gpu_idx``, ``own_row``, a GPU
operation's ``call_idx``) are 4 bytes a row, and say the same as a walk over the capture's rows
in Python; a window of more rows than they hold is refused in one line (exit 2)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner
from zym.analysis import analyze, facts
from zym.cli.main import app
from zym.schemas.errors import InputError
from zym.schemas.io import open_capture

REPO = Path(__file__).resolve().parents[2]
CAPTURES = [REPO / "sample_traces" / "gpt_decode_server.parquet",  # CUPTI and eBPF, joined
            REPO / "bench" / "whatif" / "results" / "h200-blind" / "captures" / "moe.parquet",
            REPO / "sample_traces" / "gpt_decode_server.ebpf.parquet"]  # no GPU side


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_row_columns_are_narrow_and_match_a_walk(path):
    got = analyze(path, lambda _stage: None, "all").facts
    calls, gpu = got.calls, got.gpu
    for df, cols in ((calls, ("call_idx", "_orig", "own_row")), (gpu, ("gpu_idx", "call_idx"))):
        assert {c: df.schema[c] for c in cols} == dict.fromkeys(cols, pl.Int32)

    # The second method: the capture file's rows, walked in Python.
    cap = open_capture(path)
    raw_calls = cap.load("call").select("pid", "correlation_id", "ts_ns").rows()
    raw_gpu = cap.load("gpu").select("pid", "correlation_id", "kind").rows()
    order = sorted(range(len(raw_calls)), key=lambda i: raw_calls[i][2])  # stable: ties keep
    row_of_call = {}
    for row, i in enumerate(order):
        row_of_call.setdefault((raw_calls[i][0], raw_calls[i][1]), row)  # the first one wins
    launching = [row_of_call.get((pid, corr)) for pid, corr, _ in raw_gpu]
    own = [None] * len(raw_calls)
    for g, (row, (_, _, kind)) in enumerate(zip(launching, raw_gpu)):
        if row is not None and kind != "sync" and own[row] is None:
            own[row] = g
    assert calls["call_idx"].to_list() == list(range(len(raw_calls)))
    assert calls["_orig"].to_list() == order
    assert gpu["gpu_idx"].to_list() == list(range(len(raw_gpu)))
    assert gpu["call_idx"].to_list() == launching
    assert calls["own_row"].to_list() == own
    assert sum(r is not None for r in own) > (1000 if raw_gpu else -1)  # the walk found them


def test_more_rows_than_a_row_column_holds_is_one_line_and_exit_2(monkeypatch):
    assert facts.rows_fit(facts.ROW_MAX, "calls") == facts.ROW_MAX
    with pytest.raises(InputError, match="--window"):
        facts.rows_fit(facts.ROW_MAX + 1, "calls")
    monkeypatch.setattr(facts, "ROW_MAX", 1000)  # the bundled capture: ~20 k calls
    result = CliRunner().invoke(app, ["analyze", str(CAPTURES[0]), "--no-progress"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "CUDA calls in the window" in result.stderr


def test_site_ids_are_4_bytes_where_they_fit_and_8_where_not():
    """The site table's id columns (gathered onto every event a rule keeps) are Int32 where
    their values fit; stack ids past 2^31 (a producer may number its stacks so) keep Int64
    and their values, and the sites are the same sites."""
    from zym.analysis.facts import EVENT_SITE_COLUMNS, Facts

    small = analyze(CAPTURES[0], lambda _stage: None, "all").facts
    assert [small.sites.schema[c] for c in EVENT_SITE_COLUMNS] == [pl.Int32] * 3
    far = 1 << 40
    nodes = small.nodes.with_columns(pl.col("stack_id", "parent_id", "user_node", "op_node")
                                     + far)
    large = Facts(small.data, nodes).sites
    for c in ("user_node", "site_id"):  # stack ids
        assert large.schema[c] == pl.Int64
        assert large[c].to_list() == [None if u is None else u + far
                                      for u in small.sites[c].to_list()]
    assert large.schema["code_site"] == pl.Int32  # numbered by the analysis
    rest = ["stack_id", "user_node", "site_id"]
    assert large.drop(rest).equals(small.sites.drop(rest))
