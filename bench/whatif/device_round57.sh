#!/usr/bin/env bash
# The fifty-seventh round's device calls. PART=1: the thirteenth blind round (device_blind13.sh:
# the equivalence check, every variant measured, a torch.profiler trace of each baseline), then
# what in a real loop makes torch.profiler's cost per event higher (profiler_dissect.py, never
# run on a GPU host before). PART=2: a zym capture (eBPF + CUPTI, raw: finalized on the dev
# machine) of one pass of each blind baseline. PART=3: docqa's tf32 variant (added after zym's
# first analysis named the encoder's float32 matmuls) checked and measured against the
# baseline and pad_to_longest. PART=4: the fourteenth blind round (device_blind14.sh), each
# baseline's zym capture after it (carry [".carry"]); BLIND_ROUND=15: the fifteenth
# (device_blind15.sh, nerlink and transcribe), the same way (the fifty-eighth round). Carry
# [".carry"] for PART=2; run from a lean tree (bench/device/lean_tree.sh off).
set -uo pipefail
WORKLOADS=${WORKLOADS:?set WORKLOADS}
split_large() {   # what comes back is at most 16 MiB a file
    for f in "$OUT"/*.trace.json.gz; do
        [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 15000000 ] && split -b 12M "$f" "$f.part-" && rm "$f"
    done
}
capture_each() {  # LIMIT_S: a zym capture of one pass of each workload's baseline, as a .tgz
    source .carry/on-device.sh .carry >/dev/null 2>&1
    source bench/device/run_step.sh
    for w in $WORKLOADS; do
        mkdir -p "$OUT/cap_$w"
        RUN_TAIL=3 run "$1" python3 bench/device/zym_lean.py -o "$OUT/cap_$w/$w.parquet" --keep-raw -- \
            python3 bench/whatif/harness.py "$w" serve --passes 1
        tar czf "$OUT/cap_$w.tgz" -C "$OUT" "cap_$w" && rm -rf "${OUT:?}/cap_$w"
    done
}
if [ "${PART:-1}" = 1 ]; then
    DEADLINE=${BLIND_DEADLINE:-470} WORKLOADS="$WORKLOADS" bash bench/whatif/device_blind13.sh
    DEADLINE=${DEADLINE:-575}
    split_large
    source bench/device/run_step.sh
    RUN_TAIL=12 run 100 python3 bench/whatif/profiler_dissect.py "$OUT/profiler_dissect.json"
elif [ "${PART}" = 4 ]; then
    DEADLINE=${BLIND_DEADLINE:-400} WORKLOADS="$WORKLOADS" \
        bash "bench/whatif/device_blind${BLIND_ROUND:-14}.sh"
    split_large
    DEADLINE=${DEADLINE:-580}
    capture_each 90
elif [ "${PART}" = 3 ]; then
    DEADLINE=${DEADLINE:-300}
    source bench/whatif/device_preamble.sh
    RUN_TAIL=8 run 90 python3 bench/whatif/blind13_equiv.py --device cuda --only docqa
    run 150 $H docqa measure "$OUT/docqa.tf32.measure.json" --rounds 15 \
        --variants base,tf32,pad_to_longest
else
    DEADLINE=${DEADLINE:-560}
    capture_each 200
fi
ls -la "$OUT"
echo "total ${SECONDS}s"
