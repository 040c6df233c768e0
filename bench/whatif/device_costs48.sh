#!/usr/bin/env bash
# One device call (round 48): what a fused attention kernel costs against hand-written
# attention's matmuls by dtype (bench/whatif/attention_cost.py), and what torch.profiler's
# recording costs per event of a C built-in call against a Python function's, an nn.Module
# call's and a torch op's (bench/whatif/builtin_cost.py). Run from the repository root after
# device_blind6.sh in the same call; no carry.
DEADLINE=${DEADLINE:-150}
RUN_TAIL=48
source bench/whatif/device_preamble.sh
run 60 python3 bench/whatif/attention_cost.py "$OUT/attention_cost.json" --reps 15
run 80 python3 bench/whatif/builtin_cost.py "$OUT/builtin_cost.json" --n 100000 --pairs 5
ls -la "$OUT"
echo "total ${SECONDS}s"
