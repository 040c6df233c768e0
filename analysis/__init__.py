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


def __getattr__(name: str) -> object:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value
    return value


__all__ = ["Analysis", "CallPathGraph", "CallPaths", "CaptureData", "analyze", "analyze_data",
           "build_call_paths", "load_capture"]
