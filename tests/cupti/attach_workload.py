"""A service for the attach test: started by `zym run` (dormant agent), it launches kernels
(stand-in libcuda under a stand-in runtime call CUPTI records) until STOP_FILE appears, and
logs the CLOCK_MONOTONIC time of every launch to LOG_FILE, so the test knows independently
which launches a capture window should hold. Environment: FAKECUDA, ZYM_CUPTI_LIB, STOP_FILE,
LOG_FILE."""
import ctypes
import os
import time

cupti = ctypes.CDLL(os.environ["ZYM_CUPTI_LIB"])
cupti.fake_api_begin.restype = ctypes.c_uint64
cupti.fake_api_end.argtypes = [ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int]
cuda = ctypes.CDLL(os.environ["FAKECUDA"])
LAUNCH = 211  # cudaLaunchKernel


def launch():
    t = cupti.fake_api_begin()
    cuda.cuLaunchKernel(None, 1, 1, 1, 32, 1, 1, 0, ctypes.c_void_p(5), None, None)  # @attach_launch
    cupti.fake_api_end(LAUNCH, t, 10)


def serve_one(log):
    for _ in range(4):
        t = time.monotonic_ns()
        launch()  # @attach_serve
        log.append(t)
    time.sleep(0.002)


cuda.cuInit(0)
times: list[int] = []
while not os.path.exists(os.environ["STOP_FILE"]):
    serve_one(times)
with open(os.environ["LOG_FILE"], "w") as f:
    f.write("\n".join(map(str, times)))
print(f"served {len(times)} launches; finalized {cupti.fake_finalized()}; "
      f"kernel records on {cupti.fake_kind_on(10)}")
