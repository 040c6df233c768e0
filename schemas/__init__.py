"""zym's capture file: schema v2 as code, with validated reading and atomic writing.

See README.md beside this module for the layout and why it was chosen.
"""
from .errors import CaptureError, InputError, SchemaError, ZymError
from .io import Capture, conform, is_parquet, open_capture, write_capture
from .meta import CaptureMeta
from .tables import (
    CALL_KINDS,
    COPY_KINDS,
    FRAME_KINDS,
    GPU_KINDS,
    TABLES,
    arrow_schema,
    polars_schema,
)
from .version import SCHEMA_VERSION

__all__ = [
    "CALL_KINDS", "COPY_KINDS", "FRAME_KINDS", "GPU_KINDS", "SCHEMA_VERSION", "TABLES",
    "Capture", "CaptureError", "CaptureMeta", "InputError", "SchemaError", "ZymError",
    "arrow_schema", "conform", "is_parquet", "open_capture", "polars_schema", "write_capture",
]
