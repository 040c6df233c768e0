#!/usr/bin/env bash
# One device call for one workload of bench/whatif/workloads/ (the blind round's hf_generate,
# churn, preproc): its variants measured (ROUNDS interleaved rounds, default 15), a torch.profiler
# trace and a zym capture (eBPF + CUPTI, raw kept, finalized on the dev machine) of the baseline.
#   bash bench/whatif/device_workload.sh WORKLOAD [ROUNDS]     (carry: [".carry"])
set -uo pipefail
w=${1:?usage: device_workload.sh WORKLOAD [ROUNDS]}
rounds=${2:-15}
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
DEADLINE=${DEADLINE:-520}
source bench/device/run_step.sh
RUN_TAIL=10
run 240 python3 bench/whatif/harness.py "$w" measure "$OUT/$w.measure.json" --rounds "$rounds"
run 90 python3 bench/whatif/harness.py "$w" trace "$OUT/$w.trace.json" --passes 1 \
    && gzip -1 "$OUT/$w.trace.json"
mkdir -p "$OUT/$w"
run 150 python3 bench/device/zym_lean.py -o "$OUT/$w/$w.parquet" --keep-raw -- \
    python3 bench/whatif/harness.py "$w" serve --passes 2
tar czf "$OUT/$w.tgz" -C "$OUT" "$w" && rm -rf "${OUT:?}/$w"
ls -la "$OUT"; echo "total ${SECONDS}s"
