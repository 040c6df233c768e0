#!/usr/bin/env bash
# The inference-mode round's second device call: gradvision (a CNN with batch norm and
# dropout, left in training mode, autograd on): every variant measured (15 rounds,
# interleaved in one process), a torch.profiler trace (stacks and shapes) of the baseline and
# of the eval variant (batch norm's kernels in each mode). Results: $OUT (kept in
# bench/whatif/results/<gpu>-grad/). Run from the repository root; no carry.
DEADLINE=${DEADLINE:-560}
RUN_TAIL=8
source bench/whatif/device_preamble.sh
run 150 $H gradvision measure "$OUT/gradvision.measure.json" --rounds 15
run 90 $H gradvision trace "$OUT/gradvision.trace.json" --passes 1 \
    && gzip -1 "$OUT/gradvision.trace.json"
run 90 $H gradvision trace "$OUT/gradvision-eval.trace.json" --passes 1 --variant eval \
    && gzip -1 "$OUT/gradvision-eval.trace.json"
for f in "$OUT"/*.trace.json.gz; do
    echo "$f: $(zcat "$f" | grep -c 'Sequence number') with a sequence number"
    zcat "$f" | grep -o '"name": "[^"]*\(norm\|bn_\|batch\)[^"]*"' | sort | uniq -c | sort -rn | head -8
done
ls -la "$OUT"
echo "total ${SECONDS}s"
