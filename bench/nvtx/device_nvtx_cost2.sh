#!/usr/bin/env bash
# Device call: NVTX recording's cost, second round. The first round (device_nvtx_cost.sh) saw
# whole runs flip between a ~1.7 ms and a ~2.4 ms step, in both arms (the arm without NVTX
# had them at its p90). Here: the same workload with ONE thread (--no-background), ranges and
# emit_nvtx, and again with the background thread; zym capture (eBPF + CUPTI) with NVTX
# recorded (ZYM_NVTX=1) and not (ZYM_NVTX=0), alternating pairs; every step's time kept.
# Carry [".carry"]. Results: nvtx_cost2/*.json in $OUT (tarred).
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
W=bench/nvtx/nvtx_workload.py
R=$OUT/nvtx_cost2; mkdir -p $R
one() {  # ARM NAME ARGS...
    local arm=$1 name=$2; shift 2
    local env=(ZYM_NVTX=1); [ "$arm" = off ] && env=(ZYM_NVTX=0)
    env "${env[@]}" timeout 120 python3 bench/device/zym_lean.py -o /tmp/nc/x.parquet -- \
        python3 $W "$@" --out $R/$name-$arm.json 2>&1 | grep -E '"median_ms"' | tail -1
    rm -rf /tmp/nc
}
pairs() {  # N LABEL ARGS...
    local n=$1 label=$2; shift 2
    for i in $(seq 1 $n); do
        if [ $((i % 2)) = 1 ]; then one on $label-$i "$@"; one off $label-$i "$@";
        else one off $label-$i "$@"; one on $label-$i "$@"; fi
    done
}
pairs 5 ranges1 ranges --steps 400 --no-background
pairs 2 emit1 emit --steps 200 --no-background
pairs 2 ranges2 ranges --steps 400
echo "total ${SECONDS}s"
tar czf $OUT/nvtx_cost2.tgz -C $OUT nvtx_cost2 && rm -rf $R
