#!/usr/bin/env bash
# One device call: the sidecar service (a decode loop on the request's thread, a monitoring
# thread reading a GPU statistic beside it on the same stream): its variants measured
# (interleaved rounds, one pass each) and the baseline traced with torch.profiler (stacks and
# shapes), for the replay of several threads (bench/whatif/results/h200-threads/).
# Run from the repository root; no carry needed.
DEADLINE=${DEADLINE:-420}
RUN_TAIL=12
source bench/whatif/device_preamble.sh
[ -n "${SKIP_MEASURE:-}" ] || run 200 $H sidecar measure "$OUT/sidecar.measure.json" --rounds ${ROUNDS:-41}
run 120 $H sidecar trace "$OUT/sidecar.trace.json" --passes 3 --trace-opts stack,shapes
[ -f "$OUT/sidecar.trace.json" ] && gzip -1 "$OUT/sidecar.trace.json"
[ -f "$OUT/sidecar.measure.json" ] && python3 - "$OUT/sidecar.measure.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for v, r in d["variants"].items():
    print(f"{v:12s} median {r['median_s']*1e3:8.2f} ms  p25 {r['p25_s']*1e3:8.2f}  p75 {r['p75_s']*1e3:8.2f}")
PY
ls -la "$OUT"
echo "total ${SECONDS}s"
