#!/usr/bin/env bash
# CUPTI's cost per pass in one process (bench/whatif/cupti_inproc.py) for each workload named,
# plus, per workload, one plain process's passes for reference (harness serve --times).
#   bash bench/whatif/device_cupti_inproc.sh "W1 W2 ..." [ROUNDS]      (carry: [".carry"])
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
DEADLINE=${DEADLINE:-540}
source bench/device/run_step.sh
RUN_TAIL=3
rounds=${2:-15}
for w in $1; do
  rm -rf /tmp/s; mkdir -p /tmp/s
  run 120 env PYTHONPATH=$PWD/capture/cupti/bootstrap ZYM_CUPTI_DIR=/tmp/s taskset -c 2-13 python3 bench/whatif/cupti_inproc.py "$w" "$OUT/$w.inproc.json" --rounds "$rounds"
  run 60 taskset -c 2-13 python3 bench/whatif/harness.py "$w" serve --passes 8 --times "$OUT/$w.plain.json"
done
echo "total ${SECONDS}s"
