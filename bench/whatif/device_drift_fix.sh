#!/usr/bin/env bash
# One device call: drift's launch-bound fix measured (base against CUDA graphs per batch size,
# ROUNDS interleaved rounds of one timed pass each, default 11), and a torch.profiler trace of
# the fixed variant (what zym says once it is applied). Results: bench/whatif/results/h200-drift/.
DEADLINE=${DEADLINE:-400}
RUN_TAIL=8
source bench/whatif/device_preamble.sh
run 240 $H drift measure "$OUT/drift.measure.json" --rounds "${1:-11}"
run 120 $H drift trace "$OUT/drift-graphs.trace.json" --passes 1 --variant graphs \
    --trace-opts stack,shapes && gzip -9 "$OUT/drift-graphs.trace.json"
ls -la "$OUT"
echo "total ${SECONDS}s"
