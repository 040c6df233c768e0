#!/usr/bin/env bash
# One device call: long torch.profiler traces that are not one step over and over, for the
# sampled analysis's check on the dev machine (issue 15; docs/benchmarks.md, thirty-eighth
# round: recorded with drift's first REQUESTS, 1,500, on the H200; not kept, 12 MB, beside the
# repository's limit on what a device call takes along: bench/whatif/device_drift_fix.sh's
# smaller trace is, as a capture, in bench/whatif/results/h100-drift/):
# drift (traffic that changes over a pass, rare host reads; bench/whatif/workloads/drift.py)
# and moe (routing that differs per request), several passes. A file over 16 MiB gzipped is
# removed (it would not come back). Run from the repository root; no carry needed.
DEADLINE=${DEADLINE:-500}
RUN_TAIL=6
source bench/whatif/device_preamble.sh
t() { run "$1" $H "$2" trace "$OUT/$3" --passes "$4" --trace-opts "$5" && gzip -9 "$OUT/$3"; }
t 150 drift drift.trace.json 1 stack,shapes
t 120 drift drift-nostack.trace.json 2 shapes
t 150 moe moe-long.trace.json 4 stack,shapes
find "$OUT" -name '*.gz' -size +16M -print -delete
ls -la "$OUT"
echo "total ${SECONDS}s"
