"""Workload for the NVTX end-to-end test of `zym capture` with both sides: Python -> the libcuda
stand-in (eBPF sees it) inside runtime calls the libcupti stand-in records (CUPTI sees them),
inside NVTX ranges (the libcupti stand-in is also the NVTX injection library; this script plays
the NVTX client: getenv, dlopen, InitializeInjectionNvtx2 at its first NVTX call).
Per iteration: "step" [ "layer" [2 launches], 1 launch ]; then 3 launches outside any range.
Environment: FAKECUDA, ZYM_CUPTI_LIB, ITERS, INIT_SLEEP (as e2e_workload.py)."""
import ctypes
import os
import time

cupti = ctypes.CDLL(os.environ["ZYM_CUPTI_LIB"])
cupti.fake_api_begin.restype = ctypes.c_uint64
cupti.fake_api_end.argtypes = [ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int]
cupti.fake_nvtx_push.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
cuda = ctypes.CDLL(os.environ["FAKECUDA"])
LAUNCH = 211  # cudaLaunchKernel


def nvtx_init():
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    path = libc.getenv(b"NVTX_INJECTION64_PATH")
    if path:
        ctypes.CDLL(path.decode()).InitializeInjectionNvtx2(None)


def launch():
    t = cupti.fake_api_begin()
    cuda.cuLaunchKernel(None, 1, 1, 1, 32, 1, 1, 0, ctypes.c_void_p(5), None, None)
    cupti.fake_api_end(LAUNCH, t, 10)


def layer(n):
    cupti.fake_nvtx_push(b"layer", None)
    for _ in range(n):
        launch()
    cupti.fake_nvtx_pop()


def step():
    cupti.fake_nvtx_push(b"step", None)
    layer(2)
    launch()
    cupti.fake_nvtx_pop()


cuda.cuInit(0)
time.sleep(float(os.environ.get("INIT_SLEEP", "0")))
nvtx_init()
for _ in range(int(os.environ.get("ITERS", "10"))):
    step()
for _ in range(3):
    launch()
