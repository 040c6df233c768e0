"""A target with NVTX ranges, for tests/cupti/test_nvtx.py: the stand-in libcupti (fakecupti.c)
plays both CUPTI and the NVTX injection library; this script plays an NVTX v3 client, which at
its first NVTX call reads NVTX_INJECTION64_PATH with getenv, dlopens that library and calls its
InitializeInjectionNvtx2 (NVTX's own nvtxInitInjectionLibrary does the same).

What it does, on which thread, is the test's expected value:
main thread: "step" [3 launches, "aten::addmm, seq = 1, op_id = 2" [2 launches]],
  "io" (nvtxRangeStart/End) [1 launch], mark "here", 6 launches outside any range,
  "left open" [5 launches] never popped; worker thread: "load" in domain "mydomain" [4 launches].
"""
import ctypes
import json
import os
import threading

lib = ctypes.CDLL(os.environ["ZYM_CUPTI_LIB"])
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
path = libc.getenv(b"NVTX_INJECTION64_PATH")
injected = False
if path:
    try:
        injected = bool(ctypes.CDLL(path.decode()).InitializeInjectionNvtx2(None))
    except (OSError, AttributeError):
        injected = False
lib.fake_nvtx_push.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
lib.fake_nvtx_start.argtypes = [ctypes.c_char_p]
lib.fake_nvtx_start.restype = ctypes.c_uint32
lib.fake_nvtx_end.argtypes = [ctypes.c_uint32]
lib.fake_nvtx_mark.argtypes = [ctypes.c_char_p]
facts = {"main_tid": threading.get_native_id(), "env": path.decode() if path else None,
         "injected": injected}
lib.fake_nvtx_push(b"step", None)
lib.fake_launch(3)
lib.fake_nvtx_push(b"aten::addmm, seq = 1, op_id = 2", None)
lib.fake_launch(2)
lib.fake_nvtx_pop()
lib.fake_nvtx_pop()


def worker():
    facts["worker_tid"] = threading.get_native_id()
    lib.fake_nvtx_push(b"load", b"mydomain")
    lib.fake_launch(4)
    lib.fake_nvtx_pop()


t = threading.Thread(target=worker)
t.start()
t.join()
rid = lib.fake_nvtx_start(b"io")
lib.fake_launch(1)
lib.fake_nvtx_end(rid)
lib.fake_nvtx_mark(b"here")
lib.fake_launch(6)
lib.fake_nvtx_push(b"left open", None)
lib.fake_launch(5)
print(json.dumps(facts), flush=True)
