#!/usr/bin/env bash
# Device call: is the capture's overhead the collector sharing a core with the target?
# Alternates the workload alone (CPUs 0-14) and captured with zym's collector on CPU 15.
set -x
source .carry/on-device.sh .carry >/dev/null 2>&1
last=$(( $(nproc) - 1 ))
W="timeout 150 taskset -c 0-$((last - 1)) python3 sample_traces/gpt_decode_server.py --batches ${BATCHES:-100}"
D="timeout 170 taskset -c $last python3 tests/ebpf/device/capture_driver.py"
for i in $(seq ${ROUNDS:-3}); do
  echo "== plain $i"; $W
  echo "== zym pinned $i"; $D /tmp/p$i.parquet -- $W 2>&1 | grep -E "ms per batch|kept raw"
done
