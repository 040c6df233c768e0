"""A minimal eBPF call recorder for validating the CUPTI join on real timings (device only).

    python3 uprobe_calls.py OUT.arrow -- python3 serve.py ...

Entry uprobes on libcuda's launch/copy/memset/sync entry points record (tid, bpf_ktime_get_ns,
symbol) for the command's process: what zym's eBPF collector sees, minus the Python stacks (that
is issue 5's work). Writes the calls as an Arrow IPC file with the ``call`` table's columns.
Standalone (BCC + pyarrow only) so it runs where zym's dependencies are not installed.
"""
import ctypes as ct
import glob
import os
import subprocess
import sys
import time

from bcc import BPF

SYMS = [("cuLaunchKernel", "launch"), ("cuLaunchKernelEx", "launch"), ("cuGraphLaunch", "launch"),
        ("cuMemcpyDtoHAsync_v2", "copy"), ("cuMemcpyHtoDAsync_v2", "copy"),
        ("cuMemcpyDtoDAsync_v2", "copy"), ("cuMemcpyAsync", "copy"),
        ("cuMemsetD8Async", "memset"), ("cuMemsetD32Async", "memset"),
        ("cuStreamSynchronize", "sync"), ("cuCtxSynchronize", "sync"),
        ("cuEventSynchronize", "sync")]
SYMS += [(s + "_ptsz", k) for s, k in SYMS if k != "sync" or s == "cuStreamSynchronize"]

PROG = r"""
#include <uapi/linux/ptrace.h>
struct ev { u32 tid; u32 probe; u64 ts; };
BPF_ARRAY(target, u32, 1);
BPF_PERF_OUTPUT(events);
static __always_inline int emit(struct pt_regs *ctx, u32 probe) {
    u64 pt = bpf_get_current_pid_tgid();
    u32 k = 0;
    u32 *t = target.lookup(&k);
    if (!t || (pt >> 32) != *t) return 0;
    struct ev e = {};
    e.tid = (u32)pt; e.probe = probe; e.ts = bpf_ktime_get_ns();
    events.perf_submit(ctx, &e, sizeof(e));
    return 0;
}
""" + "".join(f"int p{i}(struct pt_regs *ctx) {{ return emit(ctx, {i}); }}\n"
              for i in range(len(SYMS)))


class Ev(ct.Structure):
    _fields_ = [("tid", ct.c_uint32), ("probe", ct.c_uint32), ("ts", ct.c_uint64)]


def main():
    out = sys.argv[1]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    lib = os.environ.get("LIBCUDA") or min(glob.glob("/usr/local/nvidia/lib64/libcuda.so.*")
                                           + glob.glob("/usr/lib/x86_64-linux-gnu/libcuda.so.*"))
    b = BPF(text=PROG)
    attached = []
    for i, (sym, _) in enumerate(SYMS):
        try:
            b.attach_uprobe(name=lib, sym=sym, fn_name=f"p{i}")
            attached.append(sym)
        except Exception:  # noqa: BLE001, S110 - symbol absent in this driver
            pass
    rows = {"tid": [], "ts_ns": [], "probe": []}
    lost = [0]

    def on_event(cpu, data, size):
        e = ct.cast(data, ct.POINTER(Ev)).contents
        rows["tid"].append(e.tid)
        rows["ts_ns"].append(e.ts)
        rows["probe"].append(e.probe)

    def on_lost(n):
        lost[0] += n

    b["events"].open_perf_buffer(on_event, page_cnt=1024, lost_cb=on_lost)
    proc = subprocess.Popen(cmd)
    b["target"][ct.c_int(0)] = ct.c_uint32(proc.pid)
    while proc.poll() is None:
        b.perf_buffer_poll(timeout=100)
    for _ in range(5):
        b.perf_buffer_poll(timeout=50)
    import pyarrow as pa
    from pyarrow import ipc

    n = len(rows["tid"])
    table = pa.table({
        "pid": pa.array([proc.pid] * n, pa.int64()), "tid": pa.array(rows["tid"], pa.int64()),
        "ts_ns": pa.array(rows["ts_ns"], pa.int64()), "dur_ns": pa.array([0] * n, pa.int64()),
        "name": pa.array([SYMS[p][0] for p in rows["probe"]], pa.string()),
        "kind": pa.array([SYMS[p][1] for p in rows["probe"]], pa.string()),
    }).replace_schema_metadata({"lost": str(lost[0]), "attached": ",".join(attached),
                                "libcuda": lib, "rc": str(proc.returncode)})
    with ipc.new_file(out, table.schema) as w:
        w.write_table(table)
    print(f"uprobe_calls: {n} calls, {lost[0]} lost, {len(attached)} probes -> {out}")
    time.sleep(0)


if __name__ == "__main__":
    main()
