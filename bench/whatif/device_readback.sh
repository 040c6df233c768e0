#!/usr/bin/env bash
# Device call for the readback workload (bench/whatif/workloads/readback.py:
# syncs.sync-after-async-dtoh): torch.profiler traces (stacks, shapes) of the baseline and of
# the fixed variant, then every variant timed interleaved (25 rounds of one pass each). No carry: no zym capture here,
# since the tracked tree (58 MB) and BCC's carry (52 MB) together pass the call's 64 MiB.
set -uo pipefail
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-500}
source bench/device/run_step.sh
RUN_TAIL=10
device_env
mkdir -p "$OUT/kineto"
run 120 python3 bench/whatif/harness.py readback trace "$OUT/kineto/readback.trace.json.gz" \
    --passes 2
run 100 python3 bench/whatif/harness.py readback trace "$OUT/kineto/readback-late_wait.trace.json.gz" \
    --passes 2 --variant late_wait
run 200 python3 bench/whatif/harness.py readback measure "$OUT/readback.measure.json" --rounds 25
ls -la "$OUT" "$OUT/kineto"
echo "total ${SECONDS}s"
