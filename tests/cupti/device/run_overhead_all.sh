#!/usr/bin/env bash
# Device call: one run, alternated rounds of the workload with nothing attached, under
# `zym capture` with both sides (eBPF stacks + CUPTI; zym's collector pinned to the last CPU,
# the workload to the others in every arm) and under torch.profiler with stacks and shapes.
set -x
source .carry/on-device.sh .carry >/dev/null 2>&1
last=$(( $(nproc) - 1 ))
W="taskset -c 0-$((last - 1)) python3 sample_traces/gpt_decode_server.py --batches ${BATCHES:-40}"
for i in $(seq ${ROUNDS:-3}); do
  echo "== none $i"; timeout 120 $W
  echo "== zym $i"
  timeout 170 taskset -c $last python3 tests/cupti/device/combined_driver.py /tmp/z$i.parquet -- \
    $W 2>&1 | grep -E "ms per batch|probes"
  echo "== torch.profiler $i"; timeout 150 $W --trace /tmp/t$i.json
done
