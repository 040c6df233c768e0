"""zym's analysis engine: capture file -> call-path graph -> facts the CLI, rules and exports use.

>>> from zym.analysis import analyze                      # doctest: +SKIP
>>> result = analyze("sample_traces/gpt_decode_server.trace.json.gz")   # doctest: +SKIP
>>> result.call_paths.paths.head()                        # doctest: +SKIP
"""
from .callpath import CallPathGraph, CallPaths, build_call_paths
from .load import CaptureData, load_capture
from .report import Analysis, analyze, analyze_data

__all__ = ["Analysis", "CallPathGraph", "CallPaths", "CaptureData", "analyze", "analyze_data",
           "build_call_paths", "load_capture"]
