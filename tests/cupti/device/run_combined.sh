#!/usr/bin/env bash
# Device call (not yet run): one 5-batch capture of gpt_decode_server with BOTH sides (eBPF
# stacks + CUPTI), for the committed real joined capture. Carry .carry (fetch-carry.sh).
# Then here:  zym capture --finalize <files_at>/gpt5.parquet.raw -o sample_traces/gpt_decode_server.parquet
#   (reads gpt5.parquet.cupti/ beside it) and  zym analyze sample_traces/gpt_decode_server.parquet
set -x
source .carry/on-device.sh .carry >/dev/null 2>&1
timeout 200 python3 tests/cupti/device/combined_driver.py $OUT/gpt5.parquet -- \
  python3 sample_traces/gpt_decode_server.py --batches 5 2>&1 | tail -8
ls -la $OUT $OUT/*
