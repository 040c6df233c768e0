#!/usr/bin/env bash
# One device call (round 48): what torch.profiler's recording costs per event of a C built-in
# call against a Python function's and a torch op's (bench/whatif/builtin_cost.py, and
# calibrate.py's three-loop fit on the same host), and what a fused attention kernel costs
# against hand-written attention's matmuls by dtype (bench/whatif/attention_cost.py).
# Results: bench/whatif/results/<gpu>-costs48/. Run from the repository root; no carry.
DEADLINE=${DEADLINE:-400}
RUN_TAIL=40
source bench/whatif/device_preamble.sh
run 150 python3 bench/whatif/builtin_cost.py "$OUT/builtin_cost.json" --pairs 9
run 60 python3 bench/whatif/calibrate.py "$OUT/calibration_micro.json" profiler_micro
run 150 python3 bench/whatif/attention_cost.py "$OUT/attention_cost.json"
ls -la "$OUT"
echo "total ${SECONDS}s"
