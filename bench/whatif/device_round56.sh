#!/usr/bin/env bash
# The fifty-sixth round's device calls. PART=1: the twelfth blind round (device_blind12.sh:
# the equivalence check, every variant measured, a torch.profiler trace of each baseline),
# then torch.profiler's cost of a Python event in real loops and in loops of one call on the
# same host (profiler_context.py). PART=2: a zym capture (eBPF + CUPTI, raw: finalized on the
# dev machine) of one pass of each blind baseline. Carry [".carry"] for PART=2; run from a lean
# tree (bench/device/lean_tree.sh off).
set -uo pipefail
WORKLOADS=${WORKLOADS:?set WORKLOADS}
if [ "${PART:-1}" = 1 ]; then
    DEADLINE=${BLIND_DEADLINE:-470} WORKLOADS="$WORKLOADS" bash bench/whatif/device_blind12.sh
    DEADLINE=${DEADLINE:-570}
    for f in "$OUT"/*.trace.json.gz; do   # what comes back is at most 16 MiB a file
        [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 15000000 ] && split -b 12M "$f" "$f.part-" && rm "$f"
    done
    source bench/device/run_step.sh
    RUN_TAIL=8 run 90 python3 bench/whatif/profiler_context.py "$OUT/profiler_context.json"
else
    source .carry/on-device.sh .carry >/dev/null 2>&1
    DEADLINE=${DEADLINE:-560}
    source bench/device/run_step.sh
    for w in $WORKLOADS; do
        mkdir -p "$OUT/cap_$w"
        RUN_TAIL=3 run 200 python3 bench/device/zym_lean.py -o "$OUT/cap_$w/$w.parquet" --keep-raw -- \
            python3 bench/whatif/harness.py "$w" serve --passes 1
        tar czf "$OUT/cap_$w.tgz" -C "$OUT" "cap_$w" && rm -rf "${OUT:?}/cap_$w"
    done
fi
ls -la "$OUT"
echo "total ${SECONDS}s"
