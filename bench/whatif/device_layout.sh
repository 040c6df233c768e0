#!/usr/bin/env bash
# One device call for the convolution-layout rule (bench/whatif/workloads/convlayout.py: a
# bfloat16 CNN in NCHW): both variants measured (15 rounds, interleaved in one process), a
# torch.profiler trace (stacks and shapes) of each. Results: $OUT (kept in
# bench/whatif/results/<gpu>-layout/). Run from the repository root; no carry.
DEADLINE=${DEADLINE:-560}
RUN_TAIL=8
source bench/whatif/device_preamble.sh
run 150 $H convlayout measure "$OUT/convlayout.measure.json" --rounds 15
for v in base channels_last; do
    run 90 $H convlayout trace "$OUT/convlayout-$v.trace.json" --passes 1 --variant "$v" \
        && gzip -1 "$OUT/convlayout-$v.trace.json"
done
for f in "$OUT"/*.trace.json.gz; do
    echo "$f:"
    zcat "$f" | grep -o '"name": "[^"]*\(nchw\|Nchw\|nhwc\|Nhwc\)[^"]*"' | cut -c1-120 | sort | uniq -c | sort -rn | head -6
done
ls -la "$OUT"
echo "total ${SECONDS}s"
