#!/usr/bin/env bash
# Device call: native frames and the torch op layer in zym captures on the H200 (issue 16).
# Per workload (gpt_decode: a transformer decoder whose lines run several operators; rerank:
# an encoder; decode_loop): a zym capture (eBPF + CUPTI, native frames on, the default),
# unwound on the device where torch's libraries are, kept raw; and a torch.profiler trace of
# the same workload, whose operators the capture's are compared with. gpt_decode also once
# with --no-native (the probes' cost without the native key and copies).
# Carry [".carry"]. Here: bash bench/native/finalize.sh FILES_AT
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-540}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"
source bench/device/run_step.sh
R=$OUT/native; mkdir -p $R
for w in gpt_decode rerank decode_loop; do
    mkdir -p $R/$w
    run 150 python3 bench/device/zym_lean.py -o "$R/$w/$w.parquet" -- \
        python3 bench/whatif/harness.py "$w" serve --passes 2
    run 90 python3 bench/whatif/harness.py "$w" trace "$R/$w/$w.trace.json" --passes 1 \
        && gzip -1 "$R/$w/$w.trace.json"
done
mkdir -p $R/gpt_decode_nonative
run 120 python3 bench/device/zym_lean.py --no-native -o "$R/gpt_decode_nonative/g.parquet" -- \
    python3 bench/whatif/harness.py gpt_decode serve --passes 2
du -sh $R/*
tar czf - -C $OUT native | split -b 15m - $OUT/native.tgz.
rm -rf $R; ls -la $OUT
echo "total ${SECONDS}s"
