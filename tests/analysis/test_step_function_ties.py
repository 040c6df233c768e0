"""The step function does not depend on the run: with the sample repeated 3 times, `main` and
`<module>` cover every call equally and both repeat; which one was chosen followed the
process's string hashing (PYTHONHASHSEED). The innermost of equals is chosen now."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_traces" / "gpt_decode_server.trace.json.gz"
SHOW = ("import sys; from zym.analysis import analyze; "
        "print(analyze(sys.argv[1]).steps_in_window().function)")


def test_the_step_function_is_the_same_whatever_the_string_hashing(tmp_path):
    x3 = tmp_path / "x3.trace.json.gz"
    subprocess.run([sys.executable, str(ROOT / "bench" / "replicate_trace.py"), str(SAMPLE), "3",
                    "-o", str(x3)], check=True, capture_output=True)
    chosen = set()
    for seed in ("1", "2", "3", "4"):
        out = subprocess.run([sys.executable, "-c", SHOW, str(x3)], capture_output=True,
                             text=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed})
        chosen.add(out.stdout.strip())
    # main() is called from <module>: the inner of the two (the sample's own source)
    source = (ROOT / "sample_traces" / "gpt_decode_server.py").read_text()
    assert "\n    main()" in source or "\nmain()" in source
    assert chosen == {"gpt_decode_server.py main"}
