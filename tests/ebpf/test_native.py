"""Native frames and the torch op layer in `zym capture`: a Python line calls a C++ library
built without frame pointers (faketorch.cpp: torch's binding -> at::_ops::<op>::call ->
kernel function -> cudaLaunchKernel -> cuLaunchKernel). The frames expected here are read off
faketorch.cpp's call structure, not off zym's output."""
from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from ebpf_env import line_markers
from ebpf_helpers import calls_with_stacks, zym_capture
from zym.schemas import open_capture

pytestmark = pytest.mark.ebpf
FAKETORCH = Path(__file__).resolve().parent / "faketorch.cpp"
WORKLOAD = '''
import ctypes, os, sys, time
lib = ctypes.CDLL(os.path.join(sys.argv[1], "libfaketorch.so"))
time.sleep(0.5)     # as CUDA's own initialisation: zym probes the library once it is mapped

def layer(n):
    return lib.faketorch_linear_relu(n)  # @linear_relu

def add(n):
    return lib.faketorch_add(n)  # @add

for i in range(int(sys.argv[2])):
    layer(i)
    add(i)
'''
# Outermost first, from faketorch.cpp. faketorch_linear_relu/faketorch_add and THPVariable_add
# end in a call that -O2 turns into a jump (a tail call): they leave no frame, as in torch.
# addmm_out_cuda realigns its stack through a DRAP register: its caller's CFA is a DWARF
# expression, so the frames above it exist only if zym evaluates those.
RELU = ["torch::autograd::THPVariable_linear_relu(int)", "op aten::relu",
        "at::_ops::relu::call(int)", "at::native::relu_kernel(int)", "cudaLaunchKernel"]
ADDMM = ["torch::autograd::THPVariable_linear_relu(int)", "op aten::addmm",
         "at::_ops::addmm::call(int)", "at::native::addmm_out_cuda(int)",
         "at::native::launch_gemm(int)", "cudaLaunchKernel"]
ADD = ["op aten::add", "at::_ops::add_Tensor::call(int)", "op aten::addmm",
       "at::_ops::addmm::call(int)", "at::native::addmm_out_cuda(int)",
       "at::native::launch_gemm(int)", "cudaLaunchKernel"]
LIBRARY = {"cudaLaunchKernel": "libcudart.so.12"}


@pytest.fixture(scope="module")
def faketorch(fake_cuda) -> Path:
    if shutil.which("g++") is None:
        pytest.fail("needs g++ to build the torch stand-in (scripts/install-deps.sh)")
    out = fake_cuda / "libfaketorch.so"
    if not out.exists():
        subprocess.run(["g++", "-shared", "-fPIC", "-O2", "-fomit-frame-pointer", "-o", str(out),
                        str(FAKETORCH), str(fake_cuda / "libcudart.so.12"),
                        "-Wl,-rpath,$ORIGIN"], check=True)
    return fake_cuda


def between_python_and_api(call: dict) -> list[str]:
    """The frames between the innermost Python frame and the API frame, outermost first,
    from the innermost frame of the C++ library on (the ctypes/libffi frames above it are
    CPython's and libffi's own)."""
    stack = list(reversed(call["stack"]))       # root first
    inner = max(i for i, f in enumerate(stack) if f[0] == "python")
    middle = stack[inner + 1:-1]
    start = next(i for i, f in enumerate(middle)
                 if f[0] == "torch_op" or (f[2] or "").endswith(("libfaketorch.so",)))
    return [f"op {n}" if k == "torch_op" else n for k, n, _, _ in middle[start:]]


def run(tmp_path: Path, faketorch: Path, *args: str, iters: int = 50):
    script = tmp_path / "native_workload.py"
    script.write_text(WORKLOAD)
    r = zym_capture(["--keep-raw", *args, "--", "python3", str(script), str(faketorch),
                     str(iters)], tmp_path / "n.parquet")
    assert r.rc == 0, r.stderr
    return r, script


def test_each_operator_under_one_python_line_gets_its_native_path(faketorch, tmp_path):
    r, script = run(tmp_path, faketorch)
    marks = line_markers(script)
    calls = calls_with_stacks(r.output, native=True)
    assert len(calls) == 3 * 50
    by_line: dict[int, Counter] = {}
    for c in calls:
        line = next(ln for k, _, f, ln in c["stack"] if k == "python" and f == str(script))
        by_line.setdefault(line, Counter())[tuple(between_python_and_api(c))] += 1
    assert by_line[marks["linear_relu"]] == Counter({tuple(ADDMM): 50, tuple(RELU): 50})
    assert by_line[marks["add"]] == Counter({tuple(ADD): 50})
    # the library of each native frame, and the API frame stays last
    for c in calls:
        for kind, name, file, _ in c["stack"]:
            if kind == "native" and name in LIBRARY:
                assert Path(file).name == LIBRARY[name]
            if kind == "native" and name.startswith("at::"):
                assert Path(file).name == "libfaketorch.so"
        assert c["stack"][0][0] == "cuda_api"
    meta = open_capture(r.output).meta
    # addmm_out_cuda's alloca moves the stack pointer with n: more than 3 copies, all whole
    summary = meta.extra["native"]
    assert summary["paths"] >= 3
    assert summary["unwound_to_python"] == summary["with_torch_op"] == summary["paths"]


def test_the_op_layer_reaches_the_analysis(faketorch, tmp_path):
    """Each operator under the layer line is a site of its own, with its torch op and op
    chain, as on a torch.profiler trace; the native frames make no site of their own."""
    from zym.analysis.report import analyze

    r, script = run(tmp_path, faketorch)
    marks = line_markers(script)
    a = analyze(r.output, window="all")
    stacks = open_capture(r.output).load("call")["stack_id"].unique()
    sites = a.facts.sites.filter(a.facts.sites["stack_id"].is_in(stacks.to_list()))
    got = {(row["user_line"], row["torch_op"], row["op_chain"])
           for row in sites.iter_rows(named=True)}
    assert got == {(marks["linear_relu"], "aten::addmm", ";aten::addmm;"),
                   (marks["linear_relu"], "aten::relu", ";aten::relu;"),
                   (marks["add"], "aten::addmm", ";aten::add;aten::addmm;")}
    assert sites["site_id"].n_unique() == 3


def test_no_native_records_python_and_api_frames_only(faketorch, tmp_path):
    r, _ = run(tmp_path, faketorch, "--no-native")
    calls = calls_with_stacks(r.output, native=True)
    assert calls and all(k in ("python", "cuda_api") for c in calls for k, *_ in c["stack"])
    assert "native" not in open_capture(r.output).meta.extra


def test_a_raw_capture_finalized_elsewhere_keeps_its_native_frames(faketorch, tmp_path):
    """The frames are unwound where the capture ran; --finalize on a host without the
    libraries (here: the libraries deleted) reads them from the raw capture."""
    r, _ = run(tmp_path, faketorch, iters=5)
    raw = Path(str(r.output) + ".raw")
    assert (raw / "native_frames.arrow").exists()
    again = tmp_path / "again.parquet"
    fin = subprocess.run(["python3", "-m", "zym.cli.main", "capture", "--finalize", str(raw),
                          "-o", str(again)], capture_output=True, text=True, check=False)
    assert fin.returncode == 0, fin.stderr
    names = {n for c in calls_with_stacks(again, native=True) for _, n, _, _ in c["stack"]}
    assert "at::native::launch_gemm(int)" in names and "aten::relu" in names
