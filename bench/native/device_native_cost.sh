#!/usr/bin/env bash
# Device call: native frames on the H200, second round (after the DWARF-expression and
# cut-frame changes): a zym capture of each workload (eBPF + CUPTI, native frames on), and
# the probes' in-kernel cost with and without native frames, alternated in pairs on
# gpt_decode (the kernel's BPF run-time statistics: bpf_ns_per_call in each capture's
# metadata). Raw captures finalized here: bash bench/native/finalize.sh FILES_AT
# Carry [".carry"].
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-420}
PAIRS=${PAIRS:-4}
source bench/device/run_step.sh
R=$OUT/native2; mkdir -p $R
for w in gpt_decode rerank decode_loop; do
    mkdir -p $R/$w
    run 120 python3 bench/device/zym_lean.py -o "$R/$w/$w.parquet" -- \
        python3 bench/whatif/harness.py "$w" serve --passes 2
done
for i in $(seq 1 $PAIRS); do
    for mode in native nonative; do
        flag=""; [ $mode = nonative ] && flag="--no-native"
        mkdir -p $R/pairs/$mode-$i
        run 90 python3 bench/device/zym_lean.py $flag -o "$R/pairs/$mode-$i/g.parquet" -- \
            python3 bench/whatif/harness.py gpt_decode serve --passes 1
        # only the metadata is needed from the pairs
        find $R/pairs/$mode-$i -type f ! -name meta.json -delete
    done
done
du -sh $R/*
tar czf - -C $OUT native2 | split -b 15m - $OUT/native2.tgz.
rm -rf $R; ls -la $OUT
echo "total ${SECONDS}s"
