"""The capture's cost per call: the probes' estimate plus CUPTI's measured cost for the way
CUPTI was started (with the process, or attached: the capture then has a GPU window)."""
from importlib import resources
from types import SimpleNamespace

import yaml
from zym.analysis.report import capture_cost

COSTS = yaml.safe_load(resources.files("zym.analysis").joinpath("capture_costs.yaml")
                       .read_text("utf-8"))["cupti"]


def _meta(**extra):
    return SimpleNamespace(extra={"capture_cost": {"added_ns_per_call": 3000}, **extra})


def test_cupti_started_with_the_process():
    c = capture_cost(_meta(cupti={"spools": [{}]}))
    assert c["cupti_started"] == "launch"
    assert c["total_ns_per_call"] == 3000 + COSTS["launch"]["ns_per_call"]


def test_cupti_attached_to_a_running_process():
    c = capture_cost(_meta(cupti={"spools": [{}]}, gpu_window={"from_mono_ns": 1}))
    assert c["cupti_started"] == "attach"
    assert c["total_ns_per_call"] == 3000 + COSTS["attach"]["ns_per_call"]
    assert COSTS["attach"]["ns_per_call"] > COSTS["launch"]["ns_per_call"]


def test_no_gpu_side_is_the_probes_alone_and_other_producers_nothing():
    assert capture_cost(_meta())["total_ns_per_call"] == 3000
    assert capture_cost(SimpleNamespace(extra={})) == {}
