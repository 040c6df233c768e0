"""A finding inside an installed package names the user's own line above it."""
from __future__ import annotations

from zym.analysis.sites import own_code_caller

SP = "/usr/lib/python3/site-packages"


def frame(file: str, line: int, name: str) -> dict:
    return {"file": file, "line": line, "name": name}


def test_the_innermost_own_frame_above_a_package_site():
    frames = [frame("/srv/app/main.py", 10, "<module>"),
              frame("/srv/app/svc/handler.py", 49, "Service.handle"),
              frame(f"{SP}/transformers/generation/utils.py", 2802, "GenerationMixin.generate"),
              frame(f"{SP}/transformers/generation/utils.py", 383, "StopCheck.__call__")]
    assert own_code_caller(frames) == "svc/handler.py:49 Service.handle"


def test_none_where_the_site_is_own_code_or_nothing_of_theirs_calls_it():
    own = [frame("/srv/app/main.py", 10, "<module>"), frame("/srv/app/main.py", 20, "step")]
    assert own_code_caller(own) is None
    only_packages = [frame(f"{SP}/vllm/engine.py", 5, "run"), frame(f"{SP}/vllm/x.py", 9, "f")]
    assert own_code_caller(only_packages) is None
    assert own_code_caller([]) is None
    # an own frame below the package frames (a callback) is still the site's own code
    callback = [frame(f"{SP}/vllm/engine.py", 5, "run"), frame("/srv/app/cb.py", 3, "on_step")]
    assert own_code_caller(callback) is None
