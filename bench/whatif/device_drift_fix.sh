#!/usr/bin/env bash
# One device call: drift (bench/whatif/workloads/drift.py) traced with torch.profiler (one pass,
# stacks and shapes), its launch-bound fix measured (base against a CUDA graph per batch size,
# ROUNDS interleaved rounds of one timed pass each, default 11), and a trace of the fixed
# variant (what zym says once it is applied). The traces are imported on the dev machine and
# kept as zym captures (bench/whatif/results/h200-drift/): the JSON is 3x the Parquet.
DEADLINE=${DEADLINE:-400}
RUN_TAIL=8
source bench/whatif/device_preamble.sh
t() { run 120 $H drift trace "$OUT/$1" --passes 1 --variant "$2" --trace-opts stack,shapes \
      && gzip -9 "$OUT/$1"; }
t drift.trace.json base
run 240 $H drift measure "$OUT/drift.measure.json" --rounds "${1:-11}"
t drift-graphs.trace.json graphs
ls -la "$OUT"
echo "total ${SECONDS}s"
