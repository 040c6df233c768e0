#!/usr/bin/env bash
# Device call for memory.allocator-churn (bench/whatif/workloads/churn.py): variants measured
# (15 interleaved rounds), a zym capture (eBPF + CUPTI, raw kept) and a torch.profiler trace of
# the baseline. Carry: [".carry"].
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-300}
source bench/device/run_step.sh
RUN_TAIL=8
run 120 python3 bench/whatif/harness.py churn measure "$OUT/churn.measure.json" --rounds 15
run 60 python3 bench/whatif/harness.py churn trace "$OUT/churn.trace.json" --passes 1 \
    && gzip -1 "$OUT/churn.trace.json"
mkdir -p "$OUT/churn"
run 90 python3 bench/device/zym_lean.py -o "$OUT/churn/churn.parquet" --keep-raw -- \
    python3 bench/whatif/harness.py churn serve --passes 2
tar czf "$OUT/churn.tgz" -C "$OUT" churn && rm -rf "${OUT:?}/churn"
ls -la "$OUT"; echo "total ${SECONDS}s"
