#!/usr/bin/env bash
# One device call for a workload written for a rule: every variant measured (harness.py
# measure, 15 rounds, interleaved in one process), then a torch.profiler trace (stacks and
# shapes) of each of TRACED (default: base). Results: $OUT (kept in
# bench/whatif/results/<gpu>-<round>/). Run from the repository root; no carry.
#     WORKLOAD=tf32mlp TRACED="base bf16" bash bench/whatif/device_variants.sh
DEADLINE=${DEADLINE:-560}
RUN_TAIL=8
source bench/whatif/device_preamble.sh
run 150 $H "$WORKLOAD" measure "$OUT/$WORKLOAD.measure.json" --rounds 15
for v in ${TRACED:-base}; do
    run 90 $H "$WORKLOAD" trace "$OUT/$WORKLOAD-$v.trace.json" --passes 1 --variant "$v" \
        && gzip -1 "$OUT/$WORKLOAD-$v.trace.json"
done
[ -z "${AFTER:-}" ] || eval "$AFTER"   # a check of the traces (device_layout.sh)
ls -la "$OUT"
echo "total ${SECONDS}s"
