"""`zym diff`: captures built with a known change (one planted op), line shifts, noise, exit codes.

Expected values come from the raw events the builders write (sums over the trace's own kernel
events), not from zym's output."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
from kineto_builder import KinetoBuilder
from typer.testing import CliRunner
from zym.analysis.diff import compare, match_sites, noise_threshold, profile_of
from zym.analysis.export.diff import diff_captures, load_profile, render_markdown, render_text
from zym.cli.main import app
from zym.rules.testing import CaptureBuilder

STEPS = 12


def build_trace(path: Path, gemm_us: float = 50.0, line_shift: int = 0, seed: int = 1,
                extra_sync: bool = False) -> Path:
    """A decode-like loop: per step, two layers each launching a GEMM and a ReLU, a softmax at
    the head and a ``.item()`` readback. GPU and CPU durations jitter by a few percent (seeded),
    so steps differ as real ones do. ``gemm_us`` is the planted change; ``line_shift`` moves
    every function's first line, as an edit at the top of the file does."""
    rng = random.Random(seed)
    b = KinetoBuilder()

    def j(us: float) -> float:
        return round(us * (1 + rng.uniform(-0.03, 0.03)), 3)

    ln = lambda n: n + line_shift
    with b.py(f"app.py({ln(1)}): <module>"):
        for _ in range(STEPS):
            with b.py(f"app.py({ln(20)}): step"):
                for _layer in range(2):
                    with b.py(f"app.py({ln(40)}): mlp"):
                        with b.op("aten::mm"):
                            b.launch(kernel="gemm_kernel", gpu_us=j(gemm_us), cpu_us=j(6))
                        with b.op("aten::relu"):
                            b.launch(kernel="relu_kernel", gpu_us=j(8), cpu_us=j(5))
                with b.py(f"app.py({ln(60)}): head"):
                    with b.op("aten::softmax"):
                        b.launch(kernel="softmax_kernel", gpu_us=j(12), cpu_us=j(5))
                    with b.op("aten::item"):
                        b.launch("cudaMemcpyAsync", kernel="Memcpy DtoH (Device -> Pageable)",
                                 gpu_cat="gpu_memcpy", gpu_us=1.0, cpu_us=j(4))
                        b.launch("cudaStreamSynchronize", kernel=None, cpu_us=j(40))
                    if extra_sync:
                        with b.op("aten::item"):
                            b.launch("cudaStreamSynchronize", kernel=None, cpu_us=j(40))
                b.tick(j(20))
    return b.write(path)


def kernel_us_per_step(path: Path, name: str) -> float:
    """Straight from the trace's events: the kernel's total duration per step."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return sum(e["dur"] for e in events if e.get("cat") == "kernel" and e["name"] == name) / STEPS


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("diff")
    return {
        "base": build_trace(d / "base.json.gz", seed=1),
        "base2": build_trace(d / "base2.json.gz", seed=2),  # the same code, another run
        "fixed": build_trace(d / "fixed.json.gz", gemm_us=30.0, seed=3),
        "shifted": build_trace(d / "shifted.json.gz", gemm_us=30.0, line_shift=7, seed=4),
        "slower": build_trace(d / "slower.json.gz", gemm_us=80.0, seed=5),
        "extra": build_trace(d / "extra.json.gz", seed=6, extra_sync=True),
    }


def test_planted_change_is_the_only_change_above_noise(traces):
    d = diff_captures(traces["base"], traces["fixed"]).to_dict()
    assert d["per"] == "step"
    gpu = next(t for t in d["totals"] if t["measure"] == "gpu_ns")
    expected = 1000 * (kernel_us_per_step(traces["fixed"], "gemm_kernel")
                       - kernel_us_per_step(traces["base"], "gemm_kernel"))
    assert expected < -30_000  # ~-40 µs a step (2 GEMMs, 20 µs faster each)
    # Only the GEMMs changed, so the GPU total moves by their change; the other kernels'
    # jitter (a few hundred ns a step) is all that separates the two.
    others = sum(1000 * (kernel_us_per_step(traces["fixed"], k)
                         - kernel_us_per_step(traces["base"], k))
                 for k in ("relu_kernel", "softmax_kernel"))
    assert gpu["delta"] == pytest.approx(expected + others, abs=50)
    assert gpu["above_noise"]
    assert d["top_improvements"][0]["site"] == "app.py:40 mlp"
    assert d["top_improvements"][0]["torch_op"] == "aten::mm"
    assert [s["site"] for s in d["sites"] if s["above_noise"]] == ["app.py:40 mlp"]
    above = [k["name"] for k in d["kernels"] if k["above_noise"]]
    assert above == ["gemm_kernel"]
    assert d["top_regressions"] == []
    # GPU time only: CPU-side measures stay within noise
    assert not any(t["above_noise"] for t in d["totals"] if t["measure"] in (
        "cpu_blocked_ns", "calls", "syncs", "copies"))


def test_same_code_twice_shows_nothing_above_noise(traces):
    d = diff_captures(traces["base"], traces["base2"]).to_dict()
    assert not [t["measure"] for t in d["totals"] if t["above_noise"]]
    assert not [s["site"] for s in d["sites"] if s["above_noise"]]
    assert not [k["name"] for k in d["kernels"] if k["above_noise"]]
    assert d["matched"]["appeared"] == d["matched"]["disappeared"] == 0
    assert not d["findings"]["appeared"] and not d["findings"]["disappeared"]


def test_line_shift_keeps_every_site_matched(traces):
    d = diff_captures(traces["base"], traces["shifted"]).to_dict()
    assert d["matched"]["appeared"] == d["matched"]["disappeared"] == 0
    assert d["matched"].get("moved", 0) + d["matched"].get("function", 0) >= 3
    top = d["top_improvements"][0]
    assert (top["site_before"], top["site_after"]) == ("app.py:40 mlp", "app.py:47 mlp")
    assert [s["site"] for s in d["sites"] if s["above_noise"]] == ["app.py:47 mlp"]
    # the findings keep their identity across the move (same rule, matched site)
    assert not d["findings"]["appeared"] and not d["findings"]["disappeared"]


def test_a_new_sync_appears_with_its_blocked_time(traces):
    d = diff_captures(traces["base"], traces["extra"]).to_dict()
    syncs = next(t for t in d["totals"] if t["measure"] == "syncs")
    assert (syncs["before"], syncs["after"]) == (1, 2)  # per step, from the builder
    assert syncs["above_noise"]
    top = d["top_regressions"][0]
    assert top["site"] == "app.py:60 head"
    assert top["measures"]["cpu_blocked_ns"]["delta"] == pytest.approx(40_000, rel=0.05)


def _source_capture(path: Path, shift: int, gemm_us: float) -> Path:
    """A zym capture with the source text of each line: ``mlp`` runs a matmul at one line and
    a relu two lines below it; ``shift`` moves both (an edit above them)."""
    b = CaptureBuilder()
    root = ("python", "<module>", "/w/app.py", 1, "main()")
    step = ("python", "step", "/w/app.py", 20, "y = mlp(x)")
    mm = ("python", "mlp", "/w/app.py", 40 + shift, "h = x @ w")
    relu = ("python", "mlp", "/w/app.py", 42 + shift, "return torch.relu(h)")
    for _ in range(STEPS):
        with b.enclosing([root, step]):
            b.kernel([root, step, mm, ("torch_op", "aten::mm")], "gemm", gemm_us)
            b.kernel([root, step, relu, ("torch_op", "aten::mm")], "gemm_small", 4.0)
            b.tick(10)
    return b.write(path)


def test_moved_lines_match_by_source_text(tmp_path):
    """Line 42 before is the relu and line 42 after is the matmul (moved down by 2): matching by
    line alone would pair different code; the source text pairs the right lines."""
    before = _source_capture(tmp_path / "b.parquet", 0, 50.0)
    after = _source_capture(tmp_path / "a.parquet", 2, 30.0)
    pb, pa = load_profile(before, rules=False), load_profile(after, rules=False)
    pairs = match_sites(pb.sites, pa.sites)
    line_b = dict(zip(pb.sites["code_site"], pb.sites["line"]))
    line_a = dict(zip(pa.sites["code_site"], pa.sites["line"]))
    got = {(line_b[r[0]], line_a[r[1]], r[2]) for r in pairs.iter_rows()}
    assert (40, 42, "source") in got and (42, 44, "source") in got
    d = compare(pb, pa).to_dict()
    assert [s["site"] for s in d["sites"] if s["above_noise"]] == ["app.py:42 mlp"]
    assert d["sites"][0]["site_before"] == "app.py:40 mlp"


def test_profile_sums_equal_the_call_paths(traces):
    """The profile's per-site totals add up to the analysis' call paths (a second method)."""
    from zym.analysis import analyze

    a = analyze(traces["base"])
    p = profile_of(a)
    paths = a.call_paths.paths
    for m in ("gpu_ns", "cpu_blocked_ns", "calls", "launches", "syncs", "kernels", "copies",
              "bytes_dtoh"):
        assert p.sites[m].sum() == pytest.approx(paths[m].sum()), m
    assert p.units["wall_ns"].sum() == pytest.approx(
        a.steps_in_window().durations().sum())


def test_noise_threshold_floors_and_spread():
    # identical steps: only the floors count
    assert noise_threshold(100_000, 10 * 100_000.0 ** 2, 10, 100_000, 10 * 100_000.0 ** 2,
                           10) == pytest.approx(2_000)
    # spread: values 90/110 µs alternate (sd ~10.5 µs), 10 steps each side
    vals = [90_000, 110_000] * 5
    ss = float(sum(v * v for v in vals))
    thr = noise_threshold(100_000, ss, 10, 100_000, ss, 10)
    sd = (sum((v - 100_000) ** 2 for v in vals) / 9) ** 0.5
    assert thr == pytest.approx(3 * (2 * sd * sd / 10) ** 0.5)


def test_cli_formats_and_fail_on_regression(traces):
    runner = CliRunner()
    base, slower = str(traces["base"]), str(traces["slower"])
    r = runner.invoke(app, ["diff", base, slower, "--format", "json", "--no-progress"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    gpu = next(t for t in d["totals"] if t["measure"] == "gpu_ns")
    pct = 100 * gpu["delta"] / gpu["before"]
    assert d["regression_pct"]["gpu_ns"] == pytest.approx(pct)
    assert 30 < pct < 60  # 2 x +30 µs on ~145 µs of GPU work a step
    r = runner.invoke(app, ["diff", base, slower, "--fail-on-regression", "10", "--no-progress"])
    assert r.exit_code == 1
    assert "regression per step: GPU time +" in r.stderr
    r = runner.invoke(app, ["diff", base, slower, "--fail-on-regression", "90", "--no-progress"])
    assert r.exit_code == 0
    r = runner.invoke(app, ["diff", base, slower, "--format", "markdown", "--no-progress"])
    assert r.exit_code == 0 and "### zym diff" in r.stdout and "| GPU time |" in r.stdout
    assert "`app.py:40 mlp`" in r.stdout


def test_cli_bad_input_is_one_line_exit_2(tmp_path, traces):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = CliRunner().invoke(app, ["diff", str(bad), str(traces["base"]), "--no-progress"])
    assert r.exit_code == 2
    assert r.stderr.startswith("zym: error:") and len(r.stderr.strip().splitlines()) == 1
    r = CliRunner().invoke(app, ["diff", str(traces["base"]), str(bad), "--no-progress",
                                 "--jobs", "1"])
    assert r.exit_code == 2


def test_renderers_say_what_changed(traces):
    d = diff_captures(traces["base"], traces["fixed"], jobs=1).to_dict(10)
    text = render_text(d)
    assert "Top improvements" in text and "app.py:40 mlp" in text
    assert render_markdown(d).count("\n| GPU time |") == 1


def test_report_has_the_baseline_section(tmp_path, traces):
    """`zym report AFTER --baseline BEFORE`: the section lists what `zym diff` finds."""
    out = tmp_path / "r.html"
    r = CliRunner().invoke(app, ["report", str(traces["fixed"]), "--baseline",
                                 str(traces["base"]), "-o", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    html = out.read_text()
    section = html[html.index('<section id="baseline">'):]
    section = section[:section.index("</section>")]
    improvements = section[section.index("<h3>Improvements"):section.index("<h3>Regressions")]
    assert "app.py:40 mlp" in improvements and "GPU time -" in improvements
    regressions = section[section.index("<h3>Regressions"):section.index("<h3>Findings")]
    assert "None." in regressions
    d = diff_captures(traces["base"], traces["fixed"]).to_dict()
    gpu = next(t for t in d["totals"] if t["measure"] == "gpu_ns")
    from zym.analysis.export.diff import fmt_delta

    assert fmt_delta(gpu) in section


def test_fail_on_regression_needs_steps(tmp_path, traces):
    """Without repeated steps figures are per second: --fail-on-regression refuses to judge."""
    b = KinetoBuilder()
    with b.py("app.py(1): <module>"):
        for _ in range(20):
            with b.op("aten::mm"):
                b.launch(kernel="gemm_kernel", gpu_us=10.0)
    flat = b.write(tmp_path / "flat.json.gz")
    r = CliRunner().invoke(app, ["diff", str(flat), str(traces["base"]), "--format", "json",
                                 "--no-progress"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["per"] == "second"
    r = CliRunner().invoke(app, ["diff", str(flat), str(traces["base"]), "--no-progress",
                                 "--fail-on-regression", "5"])
    assert r.exit_code == 2 and "BEFORE has no repeated step" in r.stderr


def test_baseline_in_a_forked_child_gives_the_same_diff(traces):
    """In a fresh process (no polars query run yet) `zym diff` forks for the baseline: same
    JSON as one after the other. In this process (polars' pool started) it does not fork."""
    import subprocess
    import sys

    from zym.analysis.export.diff import fork_is_safe, start_profile

    code = ("import sys; from zym.cli import main; "
            "from zym.analysis.export.diff import start_profile, load_profile; "
            "p = start_profile(sys.argv[1], 2, rules=False); assert p.forked; "
            "a = p.result(); b = load_profile(sys.argv[1], rules=False); "
            "assert a.sites.sort('code_site').equals(b.sites.sort('code_site')); print('ok')")
    out = subprocess.run([sys.executable, "-c", code, str(traces["base"])], capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.stdout.strip() == "ok", out.stderr
    runs = [subprocess.run([sys.executable, "-m", "zym.cli.main", "diff", str(traces["base"]),
                            str(traces["fixed"]), "--format", "json", "--no-progress", "--jobs",
                            j], capture_output=True, text=True, timeout=300, check=True).stdout
            for j in ("2", "1")]
    assert json.loads(runs[0]) == json.loads(runs[1])
    import polars as pl

    big = pl.DataFrame({"a": range(200_000), "b": range(200_000)})
    big.group_by("a").agg(pl.col("b").sum())  # starts polars' thread pool here
    assert not fork_is_safe() and not start_profile(traces["base"], 2).forked


def _chunked(values: list[int], cut: int):
    import polars as pl

    return pl.concat([pl.Series("m", values[:cut], dtype=pl.Int64),
                      pl.Series("m", values[cut:], dtype=pl.Int64)], rechunk=False)


def test_totals_and_squares_are_exact_however_the_column_is_chunked():
    """A diff's thresholds come from each measure's sum of squares over the units. Summed as
    floats, they depended on where polars had split the column into chunks (which varied from
    run to run): here the sums are the exact integers' (Python's arithmetic), rounded once,
    for every split."""
    from zym.analysis.diff import _sum_and_squares

    rng = random.Random(7)
    values = [rng.randrange(10**9, 10**11) for _ in range(997)]
    want = (float(sum(values)), float(sum(v * v for v in values)))
    for cut in (0, 1, 97, 500, 996):
        assert _sum_and_squares(_chunked(values, cut)) == want


def test_site_moments_are_the_exact_sums_of_squares():
    import polars as pl
    from zym.analysis.profile import _moments

    rng = random.Random(11)
    rows = [(rng.randrange(5), unit, rng.randrange(10**9, 10**11)) for unit in range(3000)]
    df = pl.DataFrame(rows, schema={"code_site": pl.Int64, "unit": pl.Int64, "gpu_ns": pl.Int64},
                      orient="row")
    got = _moments(df.lazy(), ["code_site"], ["gpu_ns"]).collect()
    for site, total, ss in got.select("code_site", "gpu_ns", "gpu_ns__ss").iter_rows():
        mine = [v for s, _, v in rows if s == site]
        assert total == float(sum(mine))
        assert ss == float(sum(v * v for v in mine))


def _phases_capture(path: Path, prepare_us: float, post_us: float) -> Path:
    """Requests that tokenize (``prepare_us``), run four small kernels, read the answer back
    and then compute statistics (``post_us``, none at 0) before they return."""
    b = CaptureBuilder()
    step = [("python", "main", "app.py", 1), ("python", "handle", "app.py", 20)]
    for _ in range(STEPS):
        with b.enclosing(step):
            with b.enclosing(step + [("python", "tokenize", "app.py", 30)]):
                b.tick(prepare_us)
            for _ in range(4):
                b.kernel(step + [("torch_op", "aten::add")], "add", gpu_us=20)
            b.scalar_readback(step)
            if post_us:
                with b.enclosing(step + [("python", "class_stats", "app.py", 50)]):
                    b.tick(post_us)
    return b.write(path)


def test_a_step_s_two_cpu_bound_places_are_two_findings_across_captures(tmp_path):
    """Statistics after the readback (4 ms) and tokenization before the first launch (3 ms):
    two CPU-bound-step findings of the same step. After the statistics moved away, theirs
    is gone and the tokenization's is still there, not taken for the first one's change."""
    before = _phases_capture(tmp_path / "before.parquet", 3000, 4000)
    after = _phases_capture(tmp_path / "after.parquet", 3000, 0)
    d = diff_captures(before, after).to_dict()["findings"]
    rule = "utilization.cpu-bound-step"
    gone = [f["site"] for f in d["disappeared"] if f["rule_id"] == rule]
    assert gone == ["app.py:50 class_stats (each step: app.py handle)"]
    assert not [f for f in d["appeared"] if f["rule_id"] == rule]
    kept = [f for f in d["changed"] + d["unchanged"] if f["rule_id"] == rule]
    assert [(f["site_before"], f["site"]) for f in kept] == \
        [("app.py:30 tokenize (each step: app.py handle)",) * 2]
