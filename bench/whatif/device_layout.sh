#!/usr/bin/env bash
# One device call for the convolution-layout rule (bench/whatif/workloads/convlayout.py: a
# bfloat16 CNN in NCHW): both variants measured and traced (device_variants.sh), then the
# layout-conversion kernels each trace holds. Results: $OUT (kept in
# bench/whatif/results/<gpu>-layout/).
# shellcheck disable=SC2016  # (expanded by device_variants.sh)
AFTER='for f in "$OUT"/*.trace.json.gz; do
    echo "$f:"
    zcat "$f" | grep -o "\"name\": \"[^\"]*\(nchw\|Nchw\|nhwc\|Nhwc\)[^\"]*\"" | cut -c1-120 | sort | uniq -c | sort -rn | head -6
done' WORKLOAD=convlayout TRACED="base channels_last" exec bash bench/whatif/device_variants.sh
