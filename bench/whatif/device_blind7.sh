#!/usr/bin/env bash
# One device call for the seventh blind round (workloads written before zym saw them: lidardet,
# posekpt, fraudscore; bench/whatif/workloads/): each variant checked against the baseline on one
# request (bench/whatif/blind7_equiv.py), every variant measured (harness.py measure, ROUNDS
# rounds interleaved in one process, each workload's measure cut at MEASURE_S seconds), then a
# torch.profiler trace (stacks and shapes) of each baseline, gzipped.
# Run from the repository root; no carry.
DEADLINE=${DEADLINE:-460}
RUN_TAIL=8
source bench/whatif/device_preamble.sh
WORKLOADS=${WORKLOADS:-lidardet posekpt fraudscore}
RUN_TAIL=30 run 90 python3 bench/whatif/blind7_equiv.py --device cuda
for w in $WORKLOADS; do
    run "${MEASURE_S:-110}" $H "$w" measure "$OUT/$w.measure.json" --rounds "${ROUNDS:-15}"
done
for w in $WORKLOADS; do
    run 60 $H "$w" trace "$OUT/$w.trace.json" --passes 1 && gzip -1 "$OUT/$w.trace.json"
done
ls -la "$OUT"
echo "total ${SECONDS}s"
