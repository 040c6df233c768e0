#!/usr/bin/env bash
# Device call: what recording NVTX ranges costs a captured service's step, in alternating
# pairs of processes (NVTX injection is fixed when a process starts, so the two arms cannot
# share one): `zym capture` (eBPF + CUPTI) of nvtx_workload.py ranges, with NVTX recorded
# (the default) and with ZYM_NVTX=0, PAIRS pairs, the order alternating. Step medians after
# warm-up, from the workload itself. Carry [".carry"]. Results: nvtx_cost/*.json in $OUT.
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
PAIRS=${PAIRS:-5}
STEPS=${STEPS:-400}
W=bench/nvtx/nvtx_workload.py
R=$OUT/nvtx_cost; mkdir -p $R
one() {  # one ARM I
    local arm=$1 i=$2 env=(ZYM_NVTX=1)     # NVTX recording is opt-in (it was the default
    [ "$arm" = off ] && env=(ZYM_NVTX=0)   # when bench/nvtx/results/h200/cost was recorded)
    env "${env[@]}" timeout 120 python3 bench/device/zym_lean.py -o /tmp/nc/$arm-$i.parquet -- \
        python3 $W ranges --steps $STEPS --out $R/$arm-$i.json 2>&1 | grep -E '"median_ms"' | tail -1
    rm -rf /tmp/nc
}
for i in $(seq 1 $PAIRS); do
    if [ $((i % 2)) = 1 ]; then one on $i; one off $i; else one off $i; one on $i; fi
done
ls $R; echo "total ${SECONDS}s"
