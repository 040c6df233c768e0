#!/usr/bin/env bash
# One device call of the fifty-fifth round: the eleventh blind round (device_blind11.sh: the
# equivalence check, every variant measured, a torch.profiler trace of each baseline), then
# what a fused attention call costs against attention written out by hand, on the GPU
# (attention_cost.py, with the shapes of protvar's, tsanomaly's and lineocr's attention) and
# on the host (sdpa_dispatch.py), then a zym capture (eBPF + CUPTI, raw: finalized on the dev
# machine) of one pass of each blind baseline. Carry [".carry"]; run from a lean tree
# (bench/device/lean_tree.sh off).
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
BLIND=${BLIND:-bench/whatif/device_blind11.sh}
WORKLOADS=${WORKLOADS:-motionfc vocalsep}
DEADLINE=${BLIND_DEADLINE:-300} MEASURE_S=${MEASURE_S:-75} WORKLOADS="$WORKLOADS" bash "$BLIND"
DEADLINE=${DEADLINE:-520}
for f in "$OUT"/*.trace.json.gz; do   # what comes back is at most 16 MiB a file
    [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 15000000 ] && split -b 12M "$f" "$f.part-" && rm "$f"
done
source bench/device/run_step.sh
RUN_TAIL=60 run 60 python3 bench/whatif/attention_cost.py "$OUT/attention_cost.json" --reps 15 \
    --dtypes float32,float32_tf32,bfloat16 \
    --shapes 20x280x32,20x400x32,2040x512x16,64x512x16,256x256x16,64x128x32
RUN_TAIL=30 run 40 python3 bench/whatif/sdpa_dispatch.py "$OUT/sdpa_dispatch.json"
for w in $WORKLOADS; do
    mkdir -p "$OUT/cap_$w"
    RUN_TAIL=3 run 120 python3 bench/device/zym_lean.py -o "$OUT/cap_$w/$w.parquet" --keep-raw -- \
        python3 bench/whatif/harness.py "$w" serve --passes 1
    tar czf "$OUT/cap_$w.tgz" -C "$OUT" "cap_$w" && rm -rf "${OUT:?}/cap_$w"
done
ls -la "$OUT"
echo "total ${SECONDS}s"
