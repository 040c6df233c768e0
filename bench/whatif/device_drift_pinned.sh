#!/usr/bin/env bash
# One device call: drift's variants measured again together (base, graphs, pinned: ROUNDS
# interleaved rounds of one timed pass each, default 15), on whatever card the call gets.
DEADLINE=${DEADLINE:-300}
RUN_TAIL=8
source bench/whatif/device_preamble.sh
run 280 $H drift measure "$OUT/drift.measure.json" --rounds "${1:-15}"
echo "total ${SECONDS}s"
