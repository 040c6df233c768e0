#!/usr/bin/env bash
# Device call for the blind round's detect workload, whose per_image_once variant timed
# bimodal (76 or 165 ms a pass) in device_new_a.sh: a zym capture of that variant (eBPF +
# CUPTI, raw kept) to see where its time goes, and a second measurement (25 rounds).
# Carry: [".carry"].
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-400}
source bench/device/run_step.sh
RUN_TAIL=10
mkdir -p "$OUT/pio"
run 120 python3 bench/device/zym_lean.py -o "$OUT/pio/pio.parquet" --keep-raw -- \
    python3 bench/whatif/harness.py detect serve --passes 3 --variant per_image_once
run 200 python3 bench/whatif/harness.py detect measure "$OUT/detect.measure2.json" --rounds 25 \
    --variants base,per_image_once,fixed_shapes
tar czf "$OUT/pio.tgz" -C "$OUT" pio && rm -rf "${OUT:?}/pio"
ls -la "$OUT"
echo "total ${SECONDS}s"
