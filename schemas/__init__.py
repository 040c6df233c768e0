"""zym's capture file: schema v4 as code, with validated reading and atomic writing.

See README.md beside this module for the layout and why it was chosen.
"""
# Names are resolved on first use (PEP 562): importing ``zym.schemas.errors`` (every command
# does, for its error types) must not import polars and pyarrow, so `zym --help` starts fast.
_HOME = {
    "CaptureError": "errors", "InputError": "errors", "SchemaError": "errors",
    "ZymError": "errors", "Capture": "io", "conform": "io", "is_parquet": "io",
    "open_capture": "io", "write_capture": "io", "CaptureMeta": "meta", "CALL_KINDS": "tables",
    "COPY_KINDS": "tables", "FRAME_KINDS": "tables", "GPU_KINDS": "tables", "TABLES": "tables",
    "arrow_schema": "tables", "polars_schema": "tables", "SCHEMA_VERSION": "version",
}


from .lazy import lazy_names

__getattr__ = lazy_names(__name__, globals(), _HOME)

__all__ = [
    "CALL_KINDS", "COPY_KINDS", "FRAME_KINDS", "GPU_KINDS", "SCHEMA_VERSION", "TABLES",
    "Capture", "CaptureError", "CaptureMeta", "InputError", "SchemaError", "ZymError",
    "arrow_schema", "conform", "is_parquet", "open_capture", "polars_schema", "write_capture",
]
