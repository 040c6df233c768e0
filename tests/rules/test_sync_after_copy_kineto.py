"""``syncs.sync-after-async-dtoh`` on a torch.profiler trace: a non-blocking copy to the host in
one function, the ``torch.cuda.synchronize()`` after it in its caller (Kineto names a Python
frame by its function's first line, so the two sites differ by function and torch ops)."""
from __future__ import annotations

from kineto_builder import KinetoBuilder
from zym.analysis import analyze
from zym.rules import load_packs
from zym.rules.engine import evaluate_rules

RULES = {r.id: r for p in load_packs(plugins=False) for r in p.rules}
SYNC_RULES = ("syncs.sync-after-async-dtoh", "syncs.dtoh-copy-sync", "syncs.explicit-sync-in-loop")


def copy_then_sync(b: KinetoBuilder, blocking_too: bool) -> None:
    with b.py("app.py(20): step"):
        with b.op("aten::mm"):
            b.launch(kernel="gemm", gpu_us=200.0)
        with b.py("app.py(10): fetch"), b.op("aten::to"), b.op("aten::_to_copy"), \
                b.op("aten::copy_"):
            b.launch("cudaMemcpyAsync", kernel="Memcpy DtoH (Device -> Pinned)", gpu_us=2.0,
                     gpu_cat="gpu_memcpy", gpu_args={"bytes": 4096})
        b.tick(1.0)   # back in step
        b.launch("cudaDeviceSynchronize", kernel=None, cpu_us=150.0)
        b.tick(1.0)
        if blocking_too:   # .cpu() at one line: the copy and its sync under one op
            with b.py("app.py(30): read"), b.op("aten::to"), b.op("aten::_to_copy"), \
                    b.op("aten::copy_"):
                b.launch("cudaMemcpyAsync", kernel="Memcpy DtoH (Device -> Pageable)",
                         gpu_us=2.0, gpu_cat="gpu_memcpy", gpu_args={"bytes": 4096})
                b.launch("cudaStreamSynchronize", kernel=None, cpu_us=20.0)


def test_the_sync_is_found_at_the_caller_naming_the_copy(tmp_path):
    b = KinetoBuilder()
    for _ in range(4):
        copy_then_sync(b, blocking_too=True)
    a = analyze(b.write(tmp_path / "t.json"))
    found = {f.rule_id: f for f in evaluate_rules(a, [RULES[r] for r in SYNC_RULES])}
    assert set(found) == {"syncs.sync-after-async-dtoh", "syncs.dtoh-copy-sync"}
    after = found["syncs.sync-after-async-dtoh"]
    assert after.site == "app.py:20 step" and after.evidence["count"] == 4
    assert "made by other code (1 site(s), such as app.py:10 fetch)" in after.message
    assert after.evidence["stall_ns"] == 4 * 150_000
    blocking = found["syncs.dtoh-copy-sync"]
    assert blocking.site == "app.py:30 read"
    assert blocking.evidence["copies"] == 4 and blocking.evidence["syncs"] == 4
    assert blocking.message.startswith("4 device-to-host copies")
