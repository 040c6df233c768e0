#!/usr/bin/env bash
# Device call: predicted vs measured with the capture and the measurement next to each other in
# time (the H200 host's CPU speed drifts by up to 1.7x between processes: see docs/benchmarks.md),
# per workload: capture, measure, capture, measure (a zym capture of the baseline, then every
# variant interleaved in one process, 7 rounds). A sampler records every CPU's clock and the
# host's steal time each 0.5 s (host.log), to see whether the drift is frequency or neighbours.
# Carry [".carry"]. One tarball back; the raw captures are finalized on the dev machine.
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-540}
WORKLOADS=${WORKLOADS:-"gpt_decode rerank decode_loop"}
R=$OUT/paired; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null; nproc
( while true; do
    echo "t $(date +%s.%N) $(grep '^cpu ' /proc/stat)"
    echo "mhz $(grep MHz /proc/cpuinfo | awk '{printf "%d ", $4}')"
    sleep 0.5
  done ) > $R/host.log 2>/dev/null &
SAMPLER=$!
left() { echo $(( DEADLINE - SECONDS )); }
for w in $WORKLOADS; do
  for i in 1 2; do
    if [ "$(left)" -gt 60 ]; then
      echo "== ${SECONDS}s capture $w-$i"; mkdir -p $R/$w-$i
      echo "$w-$i capture start $(date +%s.%N)" >> $R/events.log
      timeout 120 python3 bench/device/zym_lean.py -o $R/$w-$i/$w-$i.parquet --keep-raw -- \
          python3 bench/whatif/harness.py $w serve --passes 2 2>&1 | grep -v finalize | tail -1
    fi
    if [ "$(left)" -gt 60 ]; then
      echo "== ${SECONDS}s measure $w-$i"
      echo "$w-$i measure start $(date +%s.%N)" >> $R/events.log
      timeout 150 python3 bench/whatif/harness.py $w measure $R/$w-$i.measure.json --rounds 7 | tail -8
    fi
  done
done
kill $SAMPLER
tar czf $OUT/paired.tgz -C $OUT paired && rm -rf $R
echo "total ${SECONDS}s"
