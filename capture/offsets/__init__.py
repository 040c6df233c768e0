"""CPython interpreter layouts: generated per-version tables and the 3.13+ self-description."""
from .cpython import TABLES
from .debug_offsets import layout_from_debug_offsets

SUPPORTED_VERSIONS: tuple[tuple[int, int], ...] = tuple(sorted(TABLES))

__all__ = ["SUPPORTED_VERSIONS", "TABLES", "layout_from_debug_offsets"]
