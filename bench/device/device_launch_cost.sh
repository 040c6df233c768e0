#!/usr/bin/env bash
# Device call: the CPU cost of one launch (a one-element add_) under each collector
# configuration, the target pinned to one core (taskset) so that the pairs share a core:
# plain processes, CUPTI's configurations switched in-process (bench/device/cupti_cost.py), the
# same under zym's eBPF session, and the eBPF session alone; then decode_loop pinned, plain and
# under CUPTI. Carry [".carry"]. One file back (res.tgz).
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-300}
BOOT=$PWD/capture/cupti/bootstrap
CORE=${CORE:-5}
R=$OUT/res; mkdir -p $R
nproc; nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
run() {  # run TAG WORKLOAD plain|cupti|ebpf|ebpfonly [ROUNDS]
    local tag=$1 w=$2 how=$3 n=${4:-15} sp=/tmp/sp-$1
    [ $(( DEADLINE - SECONDS )) -lt 40 ] && { echo "skip $tag"; return; }
    local cmd="taskset -c $CORE python3 bench/device/cupti_cost.py $w $R/$tag.json --rounds $n"
    echo "== ${SECONDS}s $tag"
    case $how in
      plain) timeout 90 $cmd --plain 2>&1 | tail -1 ;;
      cupti) mkdir -p $sp; PYTHONPATH=$BOOT:$PYTHONPATH ZYM_CUPTI_DIR=$sp timeout 90 $cmd 2>&1 | tail -1 ;;
      ebpf) timeout 120 python3 bench/device/zym_lean.py -o /tmp/c-$tag.parquet -- $cmd 2>&1 | grep -v finalize | tail -2 ;;
      ebpfonly) timeout 120 python3 bench/device/zym_lean.py --no-cupti -o /tmp/c-$tag.parquet -- $cmd --plain 2>&1 | grep -v finalize | tail -2 ;;
    esac
    rm -rf $sp /tmp/c-$tag.parquet*
}
M=micro:4000
run plain-micro-1 $M plain; run cupti-micro-1 $M cupti; run ebpf-micro-1 $M ebpf
run ebpfonly-micro-1 $M ebpfonly; run plain-micro-2 $M plain; run cupti-micro-2 $M cupti
run plain-dl-1 decode_loop plain 7; run cupti-dl-1 decode_loop cupti 5
run plain-dl-2 decode_loop plain 7
tar czf $OUT/res.tgz -C $OUT res && rm -rf $R
echo "total ${SECONDS}s"
