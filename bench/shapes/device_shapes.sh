#!/usr/bin/env bash
# Device call (issue 16): `zym capture --shapes` on the H200.
#  1. bench/shapes/matmul_service.py under torch.profiler (record_shapes, with_stack): the peer's
#     Kineto trace of the workload;
#  2. the same workload under `zym capture --shapes` and under plain `zym capture` (raw captures,
#     finalized on the development machine: no polars here);
#  3. what --shapes costs: bench/workloads/eager_decode.py (host-bound, ~hundreds of small ops a
#     step) under `zym capture` without --shapes, with it (scope entry: the mode around matmul
#     entry points) and with ZYM_SHAPES_SCOPE=all (every operator), 7 triples in rotating
#     order, every step's time.
# Carry [".carry"]. Results in $OUT: shapes.tgz (traces, raw captures, step times), log.
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
R=$OUT/shapes; mkdir -p $R/cost
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
W=bench/shapes/matmul_service.py
python3 $W --out $R/kineto-steps.json --steps 10 --trace $R/matmul.trace.json 2>&1 | tail -2
gzip -f $R/matmul.trace.json
python3 $W --out $R/bare-steps.json --steps 40 2>&1 | tail -2
for arm in shapes plain; do
    flag=""; [ $arm = shapes ] && flag="--shapes"
    timeout 150 python3 bench/device/zym_lean.py -o $R/matmul-$arm.parquet $flag -- \
        python3 $W --out $R/zym-$arm-steps.json --steps 40 2>&1 | tail -3
done
one() {  # ARM PAIR: plain, entry (--shapes, the default scope) or all (every operator)
    local flag="" scope=entry
    [ $1 != plain ] && flag="--shapes"; [ $1 = all ] && scope=all
    ZYM_SHAPES_SCOPE=$scope timeout 120 python3 bench/device/zym_lean.py -o /tmp/sc/x.parquet \
        $flag -- python3 bench/workloads/eager_decode.py --out $R/cost/$2-$1.json --steps 200 \
        2>&1 | grep -E "error|Error" | tail -2
    rm -rf /tmp/sc
}
for i in 1 2 3 4 5 6 7; do   # the three arms in a rotating order
    case $((i % 3)) in
        1) one entry $i; one plain $i; one all $i ;;
        2) one plain $i; one all $i; one entry $i ;;
        0) one all $i; one entry $i; one plain $i ;;
    esac
    echo "triple $i ${SECONDS}s"
done
echo "total ${SECONDS}s"
tar czf $OUT/shapes.tgz -C $OUT shapes && rm -rf $R
