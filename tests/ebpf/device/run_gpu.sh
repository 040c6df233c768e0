#!/usr/bin/env bash
# Device call: capture sample_traces/gpt_decode_server.py with zym's eBPF collector and measure
# its overhead (batches/s with and without capture, torch.profiler for comparison).
# Run in the repo root on the GPU machine with .carry (../shared/device/fetch-carry.sh) carried.
set -x
source .carry/on-device.sh .carry >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__)"
python3 -c "import pyarrow; print('pyarrow', pyarrow.__version__)" || true
python3 -c "import bcc; print('bcc ok')"
W="timeout 150 python3 sample_traces/gpt_decode_server.py"
D="timeout 170 python3 tests/ebpf/device/capture_driver.py"
B=${BATCHES:-40}
R=${ROUNDS:-3}
# a small capture for the sample trace and the line check
[ "${SMALL:-1}" = 1 ] && $D $OUT/gpt5.parquet -- python3 sample_traces/gpt_decode_server.py --batches 5 2>&1 | tail -5
# overhead: alternate plain and captured runs
for i in $(seq $R); do
  echo "== plain $i"; $W --batches $B
  echo "== zym $i"; $D /tmp/z$i.parquet -- python3 sample_traces/gpt_decode_server.py --batches $B 2>&1 | grep -E "ms per batch|calls|error|LOST|kept raw"
done
echo "== zym --sample 10"; $D /tmp/zs.parquet --sample 10 -- python3 sample_traces/gpt_decode_server.py --batches $B 2>&1 | grep -E "ms per batch|calls|error"
[ "${PROFILER:-1}" = 1 ] && echo "== torch.profiler" && $W --batches $B --trace /tmp/trace.json
cp -r /tmp/z1.parquet.raw $OUT/gpt40.parquet.raw 2>/dev/null; cp /tmp/z1.parquet $OUT/gpt40.parquet 2>/dev/null
ls -la $OUT $OUT/*
