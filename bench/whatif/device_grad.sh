#!/usr/bin/env bash
# One device call for the inference-mode findings (bench/whatif/workloads/encoder.py,
# graddecode.py): what autograd's recording costs an op (autograd_cost.py), every variant
# measured (harness.py measure, 15 rounds, interleaved in one process), then a torch.profiler
# trace (stacks and shapes) of each baseline and of encoder's fixed variant.
# Results: $OUT (kept in bench/whatif/results/<gpu>-grad/). Run from the repository root; no carry.
DEADLINE=${DEADLINE:-560}
RUN_TAIL=8
source bench/whatif/device_preamble.sh
run 60 python3 bench/whatif/autograd_cost.py "$OUT/autograd_cost.json"
for w in encoder graddecode; do
    run 150 $H "$w" measure "$OUT/$w.measure.json" --rounds 15
done
for w in encoder graddecode; do
    run 90 $H "$w" trace "$OUT/$w.trace.json" --passes 1 && gzip -1 "$OUT/$w.trace.json"
done
run 90 $H encoder trace "$OUT/encoder-all.trace.json" --passes 1 --variant all \
    && gzip -1 "$OUT/encoder-all.trace.json"
for f in "$OUT"/*.trace.json.gz; do
    echo "$f: $(zcat "$f" | grep -c 'Sequence number') with a sequence number," \
         "$(zcat "$f" | grep -c -i 'dropout') dropout"
done
ls -la "$OUT"
echo "total ${SECONDS}s"
