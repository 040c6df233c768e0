#!/usr/bin/env bash
# Device call: (1) what each CUPTI configuration costs the target's CPU, in-process
# (bench/device/cupti_cost.py), beside a process that never loaded CUPTI, and the same switching
# under zym's eBPF session; (2) captures for `zym diff` on the H200: the rerank workload's
# baseline twice and its .tolist() fix once, as zym captures (raw, finalized on the dev machine)
# and torch.profiler traces. Carry [".carry"]. One tarball back.
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-540}
BOOT=$PWD/capture/cupti/bootstrap
R=$OUT/res; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
left() { echo $(( DEADLINE - SECONDS )); }
cost() {  # cost TAG WORKLOAD [plain|cupti|ebpf]
    local tag=$1 w=$2 how=$3 sp=/tmp/sp-$1
    [ "$(left)" -lt 60 ] && { echo "skip $tag"; return; }
    echo "== ${SECONDS}s $tag"
    case $how in
      plain) timeout 100 python3 bench/device/cupti_cost.py $w $R/$tag.json --plain 2>&1 | tail -1 ;;
      cupti) mkdir -p $sp; PYTHONPATH=$BOOT:$PYTHONPATH ZYM_CUPTI_DIR=$sp \
               timeout 100 python3 bench/device/cupti_cost.py $w $R/$tag.json 2>&1 | tail -1 ;;
      ebpf) timeout 140 python3 bench/device/zym_lean.py -o /tmp/c-$tag.parquet -- \
               python3 bench/device/cupti_cost.py $w $R/$tag.json 2>&1 | tail -3 ;;
    esac
    rm -rf $sp /tmp/c-$tag.parquet*
}
for w in decode_loop gpt_decode; do
    cost plain-$w-1 $w plain; cost cupti-$w-1 $w cupti; cost ebpf-$w-1 $w ebpf
    cost plain-$w-2 $w plain; cost cupti-$w-2 $w cupti
done
cap() {  # cap NAME VARIANT
    [ "$(left)" -lt 45 ] && { echo "skip cap $1"; return; }
    echo "== ${SECONDS}s capture $1"
    mkdir -p $OUT/diff/$1
    timeout 100 python3 bench/device/zym_lean.py -o $OUT/diff/$1/$1.parquet --keep-raw -- \
        python3 bench/whatif/harness.py rerank serve --passes 3 --variant $2 2>&1 | tail -1
    [ "$(left)" -lt 30 ] && return
    timeout 60 python3 bench/whatif/harness.py rerank trace $OUT/diff/$1/$1.trace.json \
        --passes 3 --variant $2 && gzip -1 $OUT/diff/$1/$1.trace.json
}
cap rerank-base-a base; cap rerank-tolist tolist; cap rerank-base-b base
tar czf $OUT/results.tgz -C $OUT res diff && rm -rf $OUT/res $OUT/diff
ls -la $OUT; echo "total ${SECONDS}s"
