#!/usr/bin/env bash
# One device call for compute.tf32-matmul-could-be-bf16 (bench/whatif/workloads/tf32mlp.py:
# a float32 transformer with TF32 allowed): both variants measured (15 rounds, interleaved in
# one process), a torch.profiler trace (stacks and shapes) of each. Results: $OUT (kept in
# bench/whatif/results/<gpu>-tf32/). Run from the repository root; no carry.
DEADLINE=${DEADLINE:-560}
RUN_TAIL=8
source bench/whatif/device_preamble.sh
run 150 $H tf32mlp measure "$OUT/tf32mlp.measure.json" --rounds 15
for v in base bf16; do
    run 90 $H tf32mlp trace "$OUT/tf32mlp-$v.trace.json" --passes 1 --variant "$v" \
        && gzip -1 "$OUT/tf32mlp-$v.trace.json"
done
ls -la "$OUT"
echo "total ${SECONDS}s"
