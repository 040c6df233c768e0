# zym's CUPTI bootstrap. `zym capture` puts this folder first on the target's PYTHONPATH and sets
# ZYM_CUPTI_DIR; Python imports `sitecustomize` at startup, so the collector starts before the
# user's code, with no change to it. Then the sitecustomize this one shadows (if any) runs.
# Loaded by file path so the target needs neither zym nor its dependencies installed.
def _zym_start():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("ZYM_CUPTI_DIR") or os.environ.get("ZYM_AGENT") == "1":
        path = os.path.join(os.path.dirname(here), "agent.py")
        spec = importlib.util.spec_from_file_location("_zym_cupti_agent", path)
        agent = importlib.util.module_from_spec(spec)
        sys.modules["_zym_cupti_agent"] = agent
        spec.loader.exec_module(agent)
        agent.install()  # starts at the first import of torch/cupy/jax/... (or now: ZYM_CUPTI_EAGER=1);
        # ZYM_AGENT=1 (`zym run`): a dormant agent that `zym capture --pid` switches on
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.origin != __file__:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)


_zym_start()
del _zym_start
