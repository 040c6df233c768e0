#!/usr/bin/env bash
# Device call for the readback and stopcheck workloads (bench/whatif/workloads/: a sync after
# another line's non-blocking copy, syncs.sync-after-async-dtoh; one .item() per call of the
# step function, syncs.scalar-readback): per workload, torch.profiler traces (stacks, shapes)
# of the baseline and of the fixed variant, then every variant timed interleaved (25 rounds of
# one pass each). No carry: no zym capture here, since the tracked tree (58 MB) and BCC's
# carry (52 MB) together pass the call's 64 MiB.
set -uo pipefail
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-540}
source bench/device/run_step.sh
RUN_TAIL=10
device_env
mkdir -p "$OUT/kineto"
for w in readback:late_wait stopcheck:late_flag; do
    name=${w%%:*}; fixed=${w##*:}
    # one pass: readback's two passes came to 24 MB, past what a device call returns (16 MB)
    run 90 python3 bench/whatif/harness.py "$name" trace "$OUT/kineto/$name.trace.json.gz" \
        --passes 1
    run 90 python3 bench/whatif/harness.py "$name" trace \
        "$OUT/kineto/$name-$fixed.trace.json.gz" --passes 1 --variant "$fixed"
    run 150 python3 bench/whatif/harness.py "$name" measure "$OUT/$name.measure.json" --rounds 25
done
ls -la "$OUT" "$OUT/kineto"
echo "total ${SECONDS}s"
