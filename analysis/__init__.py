"""zym's analysis engine: capture file -> call-path graph -> facts the CLI, rules and exports use.

>>> from zym.analysis import analyze                      # doctest: +SKIP
>>> result = analyze("sample_traces/gpt_decode_server.trace.json.gz")   # doctest: +SKIP
>>> result.call_paths.paths.head()                        # doctest: +SKIP
"""
# Names are resolved on first use (PEP 562), as in zym.schemas: a module that needs only a
# light one (``zym.analysis.units`` for `zym fleet top`'s durations) does not import polars.
_HOME = {"CallPathGraph": "callpath", "CallPaths": "callpath", "build_call_paths": "callpath",
         "CaptureData": "load", "load_capture": "load", "Analysis": "report",
         "analyze": "report", "analyze_data": "report"}


from zym.schemas.lazy import lazy_names

__getattr__ = lazy_names(__name__, globals(), _HOME)

__all__ = ["Analysis", "CallPathGraph", "CallPaths", "CaptureData", "analyze", "analyze_data",
           "build_call_paths", "load_capture"]
