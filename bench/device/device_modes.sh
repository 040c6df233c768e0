#!/usr/bin/env bash
# Device call: why does a launch-bound workload run 1.7x slower in one process than in the next?
# Plain processes (no profiler) of decode_loop and of the launch microbenchmark, back to back,
# while a sampler records the GPU's SM/memory clocks, power state and utilization every 0.2 s
# (nvidia-smi) and the CPU the main thread runs on (ps psr). No carry needed. One tarball back.
set -uo pipefail
export PYTHONUNBUFFERED=1
R=$OUT/modes; mkdir -p $R
lscpu | grep -E "Model name|Socket|NUMA|Thread|Core" > $R/lscpu.txt
nvidia-smi topo -m > $R/topo.txt 2>&1
( while true; do
    echo "$(date +%s.%N) $(nvidia-smi --query-gpu=clocks.sm,clocks.mem,pstate,utilization.gpu,power.draw --format=csv,noheader,nounits)"
    sleep 0.2
  done ) > $R/gpu.log 2>/dev/null &
S=$!
for i in 1 2 3 4; do
  echo "decode_loop-$i start $(date +%s.%N)" >> $R/events.log
  timeout 60 python3 bench/device/cupti_cost.py decode_loop $R/dl-$i.json --plain --rounds 7 &
  P=$!; sleep 8; echo "decode_loop-$i psr $(ps -o psr= -p $P)" >> $R/events.log; wait $P
  echo "micro-$i start $(date +%s.%N)" >> $R/events.log
  timeout 40 python3 bench/device/cupti_cost.py micro:4000 $R/micro-$i.json --plain --rounds 9
done
kill $S; tar czf $OUT/modes.tgz -C $OUT modes && rm -rf $R; echo "total ${SECONDS}s"
