"""Decode ``_Py_DebugOffsets`` (CPython 3.13+), the layout description CPython keeps at the
start of ``_PyRuntime`` for out-of-process tools.

Struct order from CPython v3.13.0 ``Include/internal/pycore_runtime.h`` (every field a
``uint64_t`` after the 8-byte cookie). 3.14 inserted fields (``pycore_debug_offsets.h``), so
this decoder is used only for 3.13 and refuses other versions.
"""
from __future__ import annotations

import struct

COOKIE = b"xdebugpy"

# (field name in _Py_DebugOffsets, name in zym's layout table or "" when unused)
_FIELDS_3_13: tuple[tuple[str, str], ...] = (
    ("version", ""), ("free_threaded", ""),
    ("runtime_state.size", ""), ("runtime_state.finalizing", ""),
    ("runtime_state.interpreters_head", ""),
    ("interpreter_state.size", ""), ("interpreter_state.id", ""), ("interpreter_state.next", ""),
    ("interpreter_state.threads_head", ""), ("interpreter_state.gc", ""),
    ("interpreter_state.imports_modules", ""), ("interpreter_state.sysdict", ""),
    ("interpreter_state.builtins", ""), ("interpreter_state.ceval_gil", ""),
    ("interpreter_state.gil_runtime_state", ""),
    ("interpreter_state.gil_runtime_state_enabled", ""),
    ("interpreter_state.gil_runtime_state_locked", ""),
    ("interpreter_state.gil_runtime_state_holder", ""),
    ("thread_state.size", ""), ("thread_state.prev", ""), ("thread_state.next", ""),
    ("thread_state.interp", ""), ("thread_state.current_frame", "ts_frame"),
    ("thread_state.thread_id", ""), ("thread_state.native_thread_id", ""),
    ("thread_state.datastack_chunk", "ts_datastack_chunk"), ("thread_state.status", ""),
    ("interpreter_frame.size", ""), ("interpreter_frame.previous", "f_previous"),
    ("interpreter_frame.executable", "f_code"), ("interpreter_frame.instr_ptr", "f_instr"),
    ("interpreter_frame.localsplus", ""), ("interpreter_frame.owner", "f_owner"),
    ("code_object.size", ""), ("code_object.filename", "co_filename"),
    ("code_object.name", "co_name"), ("code_object.qualname", "co_qualname"),
    ("code_object.linetable", "co_linetable"), ("code_object.firstlineno", "co_firstlineno"),
    ("code_object.argcount", ""), ("code_object.localsplusnames", ""),
    ("code_object.localspluskinds", ""), ("code_object.co_code_adaptive", "co_code_adaptive"),
    ("pyobject.size", ""), ("pyobject.ob_type", "ob_type"),
    ("type_object.size", ""), ("type_object.tp_name", ""), ("type_object.tp_repr", ""),
    ("type_object.tp_flags", ""),
    ("tuple_object.size", ""), ("tuple_object.ob_item", ""), ("tuple_object.ob_size", ""),
    ("list_object.size", ""), ("list_object.ob_item", ""), ("list_object.ob_size", ""),
    ("dict_object.size", ""), ("dict_object.ma_keys", ""), ("dict_object.ma_values", ""),
    ("float_object.size", ""), ("float_object.ob_fval", ""),
    ("long_object.size", ""), ("long_object.lv_tag", ""), ("long_object.ob_digit", ""),
    ("bytes_object.size", ""), ("bytes_object.ob_size", "ob_size"),
    ("bytes_object.ob_sval", "bytes_sval"),
    ("unicode_object.size", ""), ("unicode_object.state", "unicode_state"),
    ("unicode_object.length", ""), ("unicode_object.asciiobject_size", "ascii_data"),
)
DEBUG_OFFSETS_SIZE = 8 + 8 * len(_FIELDS_3_13)


def layout_from_debug_offsets(raw: bytes, table: dict[str, int]) -> dict[str, int]:
    """Overlay the offsets a 3.13 target describes itself on ``table`` (the generated one).

    ``raw`` is at least ``DEBUG_OFFSETS_SIZE`` bytes read at ``&_PyRuntime``. Raises
    ``ValueError`` when the cookie is absent, the version is not 3.13, or the build is
    free-threaded.
    """
    if raw[:8] != COOKIE:
        raise ValueError("no _Py_DebugOffsets cookie at _PyRuntime")
    values = struct.unpack_from(f"<{len(_FIELDS_3_13)}Q", raw, 8)
    named = dict(zip((f for f, _ in _FIELDS_3_13), values))
    version = named["version"]
    if (version >> 24, (version >> 16) & 0xFF) != (3, 13):
        raise ValueError(f"_Py_DebugOffsets of version {version:#x}; this decoder reads 3.13")
    if named["free_threaded"]:
        raise ValueError("free-threaded CPython build (3.13t): not supported")
    layout = dict(table)
    layout.update({ours: named[theirs] for theirs, ours in _FIELDS_3_13 if ours})
    return layout
