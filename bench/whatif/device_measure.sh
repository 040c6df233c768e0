#!/usr/bin/env bash
# Device call 2 of 2 for the predicted-vs-measured table: every variant of every workload
# (the baseline and each fix, in the workload's source), interleaved in one process, 9 rounds;
# then the calibration constants (bench/whatif/calibrate.py). Needs only torch (no carry).
set -uo pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for w in gpt_decode rerank decode_loop; do
    timeout 170 python3 bench/whatif/harness.py "$w" measure "$OUT/$w.measure.json" --rounds 9
done
timeout 150 python3 bench/whatif/calibrate.py "$OUT/calibration.json"
ls -la "$OUT"
