#!/bin/bash
# The agent's stop during a periodic flush, on the H200's CUPTI: arms A (an agent folder:
# the code before the stop waited for the flush) and B (this tree's), interleaved, RUNS each.
# usage: bench/device/stop_in_flush.sh RUNS N_KERNELS A_CUPTI_DIR  (B: capture/cupti)
set -u
runs=$1; n=$2; a_dir=$3
out=${OUT:-/tmp}/stop_in_flush.jsonl
: > "$out"
for i in $(seq 1 "$runs"); do
  for arm in A B; do
    dir=capture/cupti; [ "$arm" = A ] && dir=$a_dir
    spool=$(mktemp -d)
    res=$(PYTHONPATH="$dir/bootstrap" ZYM_CUPTI_DIR="$spool" ZYM_CUPTI_FLUSH_MS=2 \
          timeout 120 python3 bench/device/stop_in_flush.py "$n" 2>/tmp/err.txt | tail -1)
    cnt=$(python3 bench/device/stop_in_flush.py --count "$spool" "$dir/agent.py" 2>&1 | tail -1)
    echo "{\"arm\": \"$arm\", \"run\": $i, \"target\": ${res:-null}, \"spool\": ${cnt}}" | tee -a "$out"
    [ -s /tmp/err.txt ] && tail -2 /tmp/err.txt
    rm -rf "$spool"
  done
done
