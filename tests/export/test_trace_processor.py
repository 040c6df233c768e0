"""The sample's Perfetto export loaded by Perfetto's own trace processor, checked by SQL.

Runs only where a ``trace_processor_shell`` binary is given (it cannot be downloaded here):

    ZYM_TRACE_PROCESSOR=/path/to/trace_processor_shell pytest tests/export/test_trace_processor.py
"""
from __future__ import annotations

import os
from collections import Counter

import pytest

TP = os.environ.get("ZYM_TRACE_PROCESSOR")
pytestmark = pytest.mark.skipif(not TP, reason="set ZYM_TRACE_PROCESSOR to a "
                                               "trace_processor_shell binary to run")


@pytest.fixture(scope="module")
def tp(sample_pftrace):
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    with TraceProcessor(trace=str(sample_pftrace),
                        config=TraceProcessorConfig(bin_path=TP, load_timeout=120)) as tp:
        yield tp


def q(tp, sql: str) -> list[dict]:
    return tp.query(sql).as_pandas_dataframe().to_dict("records")


def test_no_import_errors(tp):
    bad = q(tp, "SELECT name, idx, severity, value FROM stats "
                "WHERE value > 0 AND severity IN ('error', 'data_loss')")
    assert bad == []


def test_slice_flow_and_track_counts(tp, checked):
    slices = sum(len(v) for v in checked.slices.values())
    assert q(tp, "SELECT count(*) AS n FROM slice")[0]["n"] == slices
    assert q(tp, "SELECT count(*) AS n FROM flow")[0]["n"] == checked.flows
    per_track = q(tp, "SELECT t.name AS track, count(*) AS n FROM slice s "
                      "JOIN track t ON s.track_id = t.id GROUP BY t.id")
    got = Counter({r["track"]: r["n"] for r in per_track})
    want = Counter()
    for uuid, sl in checked.slices.items():
        want[checked.tracks[uuid]["name"]] += len(sl)
    assert got["Stream 7"] == want["Stream 7"] == 9444


def test_kernels_keep_their_arguments_and_depth(tp):
    rows = q(tp, "SELECT count(*) AS n, max(depth) AS depth, "
                 "sum(extract_arg(arg_set_id, 'debug.correlation') IS NULL) AS no_corr "
                 "FROM slice WHERE category = 'kernel'")[0]
    assert rows["n"] == 8360 and rows["depth"] == 0 and rows["no_corr"] == 0
    cpu = q(tp, "SELECT max(s.depth) AS depth FROM slice s JOIN thread_track t "
                "ON s.track_id = t.id")[0]
    assert cpu["depth"] > 10


def test_flows_go_from_calls_to_gpu_work(tp):
    rows = q(tp, "SELECT so.category AS src, si.category AS dst, count(*) AS n FROM flow f "
                 "JOIN slice so ON f.slice_out = so.id JOIN slice si ON f.slice_in = si.id "
                 "GROUP BY 1, 2")
    assert {r["src"] for r in rows} == {"cuda_api"}
    assert {"kernel", "gpu_memcpy"} <= {r["dst"] for r in rows}


def test_counters_and_findings(tp, export_source):
    counters = {r["name"] for r in q(tp, "SELECT DISTINCT t.name FROM counter c "
                                         "JOIN counter_track t ON c.track_id = t.id")}
    assert {"GPU busy", "copy bandwidth"} <= counters
    n = q(tp, "SELECT count(*) AS n FROM slice WHERE category = 'zym_finding'")[0]["n"]
    assert n == sum(f["occurrences"].height for f in export_source.findings)
