"""CUPTI activity record layouts as numpy structured dtypes, and the enums zym maps.

Provenance: field offsets and sizes come from CUPTI's own headers, printed by
``gen/generate.sh`` (offsetof/sizeof compiled with gcc):

* CUPTI 13.0 (``CUPTI_API_VERSION 130001``, nvidia-cuda-cupti 13.0.85): ``CUpti_ActivityAPI``,
  ``CUpti_ActivityKernel10``, ``CUpti_ActivityMemcpy6``, ``CUpti_ActivityMemset4``,
  ``CUpti_ActivitySynchronization2``. They equal cupti-python 13.0.1's ``activity_*_dtype``
  (``tests/cupti/test_decode.py`` compares them when cupti-python is installed), and the H200's
  records decode with them.
* CUPTI 12.8 (``CUPTI_API_VERSION 26``, nvidia-cuda-cupti-cu12 12.8.90): the same structs but
  ``CUpti_ActivityKernel9`` (208 bytes instead of 216; the fields zym reads sit at the same
  offsets). Other 12.x releases are decoded with it; a wrong record size cannot go unnoticed,
  since the walk of each buffer must end exactly at its end (``undecoded_bytes``).
* ``CUpti_ActivityMarker2`` (NVTX marks and ranges): 56 bytes, the same in CUPTI 13.0's header
  (printed by ``gen/generate.sh``) and in the CUPTI 9.2 to 13.0 API documentation (unchanged
  since CUDA 9.2); the object id is a union whose ``pt`` member (process id, thread id) is set
  for thread markers (``objectKind`` 2, CUPTI_ACTIVITY_OBJECT_THREAD).

Only the fields zym reads are named; ``itemsize`` keeps the record size.
"""
from __future__ import annotations

import numpy as np

from .agent import (
    KIND_CONCURRENT_KERNEL,
    KIND_DRIVER,
    KIND_INTERNAL_LAUNCH_API,
    KIND_MARKER,
    KIND_MEMCPY,
    KIND_MEMSET,
    KIND_RUNTIME,
    KIND_SYNCHRONIZATION,
    RECORD_SIZES,
)


def _dt(fields: dict[str, tuple[str, int]], itemsize: int) -> np.dtype:
    return np.dtype({"names": list(fields), "formats": [f for f, _ in fields.values()],
                     "offsets": [o for _, o in fields.values()], "itemsize": itemsize})


API_13 = _dt({"kind": ("<i4", 0), "cbid": ("<u4", 4), "start": ("<u8", 8), "end": ("<u8", 16),
              "process_id": ("<u4", 24), "thread_id": ("<u4", 28),
              "correlation_id": ("<u4", 32), "return_value": ("<u4", 36)}, 40)
_KERNEL_FIELDS = {"kind": ("<i4", 0), "start": ("<u8", 16), "end": ("<u8", 24),
                  "device_id": ("<u4", 40), "context_id": ("<u4", 44), "stream_id": ("<u4", 48),
                  "grid_x": ("<i4", 52), "grid_y": ("<i4", 56), "grid_z": ("<i4", 60),
                  "block_x": ("<i4", 64), "block_y": ("<i4", 68), "block_z": ("<i4", 72),
                  "correlation_id": ("<u4", 92), "name": ("<i8", 104),
                  "graph_node_id": ("<u8", 144), "graph_id": ("<u4", 156)}
KERNEL_13 = _dt(_KERNEL_FIELDS, 216)  # CUpti_ActivityKernel10
KERNEL_12 = _dt(_KERNEL_FIELDS, 208)  # CUpti_ActivityKernel9
MEMCPY_13 = _dt({"kind": ("<i4", 0), "copy_kind": ("u1", 4), "src_kind": ("u1", 5),
                 "dst_kind": ("u1", 6), "bytes": ("<u8", 8), "start": ("<u8", 16),
                 "end": ("<u8", 24), "device_id": ("<u4", 32), "context_id": ("<u4", 36),
                 "stream_id": ("<u4", 40), "correlation_id": ("<u4", 44),
                 "graph_node_id": ("<u8", 64), "graph_id": ("<u4", 72)}, 96)
MEMSET_13 = _dt({"kind": ("<i4", 0), "value": ("<u4", 4), "bytes": ("<u8", 8),
                 "start": ("<u8", 16), "end": ("<u8", 24), "device_id": ("<u4", 32),
                 "context_id": ("<u4", 36), "stream_id": ("<u4", 40),
                 "correlation_id": ("<u4", 44), "memory_kind": ("<u2", 50),
                 "graph_node_id": ("<u8", 64), "graph_id": ("<u4", 72)}, 88)
SYNC_13 = _dt({"kind": ("<i4", 0), "type": ("<i4", 4), "start": ("<u8", 8), "end": ("<u8", 16),
               "correlation_id": ("<u4", 24), "context_id": ("<u4", 28),
               "stream_id": ("<u4", 32), "cuda_event_id": ("<u4", 36)}, 56)
MARKER_2 = _dt({"kind": ("<i4", 0), "flags": ("<i4", 4), "timestamp": ("<u8", 8),
                "id": ("<u4", 16), "object_kind": ("<i4", 20), "process_id": ("<u4", 24),
                "thread_id": ("<u4", 28), "name": ("<i8", 40), "domain": ("<i8", 48)}, 56)
# CUpti_ActivityFlag bits of a marker, and CUpti_ActivityObjectKind of a thread
MARKER_INSTANT, MARKER_START, MARKER_END = 1 << 0, 1 << 1, 1 << 2
OBJECT_PROCESS, OBJECT_THREAD = 1, 2

# cupti-python attribute names of the same layouts (for the cross-check test).
CUPTI_PYTHON_NAMES = {"API_13": "activity_api_dtype", "KERNEL_13": "activity_kernel10_dtype",
                      "MEMCPY_13": "activity_memcpy6_dtype", "MEMSET_13": "activity_memset4_dtype",
                      "SYNC_13": "activity_synchronization2_dtype"}
# cupti-python 13.0.1 nests the marker's object id (``object_id.pt``) and names ``flags_``:
# its dtype is compared field by field through this map (tests/cupti/test_nvtx.py).
MARKER_2_CUPTI_PYTHON = ("activity_marker2_dtype",
                         {"flags": "flags_", "process_id": "object_id", "thread_id": "object_id"})

LAYOUTS: dict[int, dict[int, np.dtype]] = {
    major: {KIND_RUNTIME: API_13, KIND_DRIVER: API_13, KIND_INTERNAL_LAUNCH_API: API_13,
            KIND_CONCURRENT_KERNEL: kernel, KIND_MEMCPY: MEMCPY_13, KIND_MEMSET: MEMSET_13,
            KIND_SYNCHRONIZATION: SYNC_13, KIND_MARKER: MARKER_2}
    for major, kernel in ((13, KERNEL_13), (12, KERNEL_12))
}
for _major, _sizes in RECORD_SIZES.items():  # the agent's walk uses the same sizes
    assert {k: d.itemsize for k, d in LAYOUTS[_major].items()} == _sizes

# CUpti_ActivityMemcpyKind -> schema copy_kind (array copies fold into device, as in apis.py)
COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoD", 4: "DtoH", 5: "DtoD", 6: "DtoD", 7: "DtoD",
              8: "DtoD", 9: "HtoH", 10: "PtoP"}
# CUpti_ActivityMemoryKind -> schema src_mem/dst_mem
MEMORY_KINDS = {1: "pageable", 2: "pinned", 3: "device", 4: "array", 5: "managed",
                6: "device", 7: "managed"}
# CUpti_ActivitySynchronizationType -> name (Kineto's names for its cuda_sync events)
SYNC_NAMES = {0: "Unknown Sync", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync",
              4: "Context Sync"}
# Kineto names copies "Memcpy HtoD (Pageable -> Device)"; zym uses the same.
COPY_NAME = {"HtoD": "Memcpy HtoD", "DtoH": "Memcpy DtoH", "DtoD": "Memcpy DtoD",
             "HtoH": "Memcpy HtoH", "PtoP": "Memcpy PtoP"}
UINT32_MAX = 0xFFFFFFFF


def cupti_major(api_version: int) -> int:
    """CUPTI's major version from ``cuptiGetVersion`` (see ``agent.cupti_major``)."""
    from .agent import cupti_major as major

    return major(api_version)


def dtypes_for(api_version: int) -> dict[int, np.dtype]:
    major = cupti_major(api_version)
    if major not in LAYOUTS:
        from zym.schemas.errors import CaptureError

        raise CaptureError(f"CUPTI {major}.x record layouts are not known to this zym (it decodes "
                           f"{', '.join(f'{m}.x' for m in LAYOUTS)}); capture with CUDA 12 or 13")
    return LAYOUTS[major]
