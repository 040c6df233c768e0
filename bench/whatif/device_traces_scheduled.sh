#!/usr/bin/env bash
# One device call: torch.profiler traces recorded with torch's documented schedule (prof.step()
# each pass, tensorboard_trace_handler's files): without Python stacks (zym's steps then come
# from the ProfilerStep#N ranges), and with two cycles (two files, `zym import` of the
# folder). Results: bench/whatif/results/h200-varied/. No carry needed.
set -uo pipefail
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-300}
RUN_TAIL=4
source bench/device/run_step.sh
H="python3 bench/whatif/harness.py"
run 90 $H moe trace "$OUT/moe-schedule-nostack" --passes 4 --trace-opts shapes,schedule
run 90 $H detect trace "$OUT/detect-schedule2" --passes 2 --trace-opts stack,shapes,schedule2
for d in "$OUT"/*/; do for f in "$d"*.json; do gzip -9 "$f"; done; done
ls -laR "$OUT"
echo "total ${SECONDS}s"
