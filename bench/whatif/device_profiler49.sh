#!/usr/bin/env bash
# One device call (round 49): what torch.profiler's recording costs each of eight services'
# baselines by its settings (bench/whatif/profiler_options.py: plain, and traced with neither
# stacks nor shapes, stacks, shapes, both; the events a traced pass records by kind). Run from
# the repository root; no carry. Results: $OUT/W.options.json.
DEADLINE=${DEADLINE:-420}
RUN_TAIL=6
source bench/whatif/device_preamble.sh
for w in ${WORKLOADS:-cliptag decode_loop churn detect mottrack gpt_decode ctseg tsanomaly}; do
    run 70 python3 bench/whatif/profiler_options.py "$w" "$OUT/$w.options.json" --rounds "${ROUNDS:-5}"
done
ls -la "$OUT"
echo "total ${SECONDS}s"
