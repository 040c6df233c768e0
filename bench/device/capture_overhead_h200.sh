#!/usr/bin/env bash
# One device call (<= 8 minutes) on the lent H200, from the repository root, with .carry carried:
#   source .carry/on-device.sh .carry && bash bench/device/capture_overhead_h200.sh
# Writes to $OUT (8 files): log.txt, percall.json, percall-cupti.json,
# e2e-{graph_replay,eager_decode,service}.json, sample.tgz (the re-recorded sample's raw capture), raw-e2e.tgz (one captured run per workload).
# (a stage cut by its limit still leaves the results of its finished runs.)
# Then here: bash bench/device/finalize_h200.sh <files_at>   (tables, and the sample re-finalized)
# Each stage has its own timeout and a deadline check, so a stage that fails or runs long does
# not cost the others; every stage's output goes to log.txt.
set -u
OUT=${OUT:?OUT must be set (the device call sets it)}
DEADLINE=${DEADLINE:-420}          # seconds from start; stages that would pass it are skipped
LOG=$OUT/log.txt
Z="python3 bench/device/zym_lean.py"
W=/tmp/zym-h200
rm -rf $W && mkdir -p $W
last=$(( $(nproc) - 1 ))
left() { echo $(( DEADLINE - SECONDS )); }
stage() {   # stage NAME MAX_SECONDS CMD...
  local name=$1 max=$2; shift 2
  if [ "$(left)" -lt 20 ]; then echo "== $name: skipped (deadline)" | tee -a $LOG; return; fi
  [ "$max" -gt "$(left)" ] && max=$(left)
  echo "== $name (<= ${max}s) at ${SECONDS}s" | tee -a $LOG
  timeout "$max" "$@" >> $LOG 2>&1
  echo "== $name: rc $? at ${SECONDS}s" | tee -a $LOG
}
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  uname -r; nproc
  python3 -c "import sys, numpy, pyarrow, torch, bcc; print(sys.version.split()[0], 'numpy', numpy.__version__, 'pyarrow', pyarrow.__version__, 'torch', torch.__version__)"
  python3 -c "import polars" 2>&1 | tail -1
  ldconfig -p | grep libcuda.so.1
} > $LOG 2>&1
cat $LOG

# 1. The bundled sample, re-recorded with this collector (eBPF + CUPTI), finalized back home.
stage sample 60 $Z -o $W/s/gpt5.parquet --keep-raw -- python3 sample_traces/gpt_decode_server.py --batches 5
tar czf $OUT/sample.tgz -C $W/s gpt5.parquet.raw gpt5.parquet.cupti 2>> $LOG

# 2. Per call, real libcuda via ctypes (an empty PTX kernel): kinds x depths 10/50/150, zym on
#    an idle core and on the target's core, the trap alone; then with CUPTI in the target.
stage percall 110 python3 bench/capture_overhead.py percall --lib real --pairs 2 --batches 8 \
  --consumer idle,shared --cupti off --trap --target-cpu 2 --zym-cpu 3 --zym "$Z" -o $OUT/percall.json
stage percall-cupti 40 python3 bench/capture_overhead.py percall --lib real --pairs 2 --batches 8 \
  --depths 50 --consumer idle --cupti on --target-cpu 2 --zym-cpu 3 --zym "$Z" -o $OUT/percall-cupti.json

# 3. End to end, 7 interleaved pairs per workload (workload on CPUs 0..last-1, zym on the last).
for w in graph_replay eager_decode service; do
  stage "e2e $w" 80 python3 bench/capture_overhead.py e2e --name $w --pairs 7 \
    --target-cpus 0-$((last - 1)) --zym-cpu $last --zym "$Z" --keep-dir $W/raw-$w \
    -o $OUT/e2e-$w.json -- python3 bench/workloads/$w.py --out {out}
done
# keep one captured run's raw streams per workload (their capture_cost is in the JSON too)
(cd $W && tar czf $OUT/raw-e2e.tgz $(ls -d raw-*/*-0.parquet.raw 2>/dev/null)) 2>> $LOG
ls -la $OUT
echo "total ${SECONDS}s"
