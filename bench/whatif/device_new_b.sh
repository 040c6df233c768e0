#!/usr/bin/env bash
# Device call B (right after device_new_a.sh, whose .devsite/ it uses for polars):
# zym captures (eBPF + CUPTI, raw kept, finalized on the dev machine) of the blind round's
# baselines; then `zym capture --rotate 4` of gpt_decode's service for 60 passes (intervals
# finalized there, while it runs) and a one-file capture of the same command, for the check
# that every kernel is in exactly one interval file (bench/rotate/check_device.py, here).
# Carry: [".carry"] (../shared/device/fetch-carry.sh).
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-540}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
source bench/device/run_step.sh
RUN_TAIL=10
for w in ${WORKLOADS:-vision moe}; do
    mkdir -p "$OUT/$w"
    run 120 python3 bench/device/zym_lean.py -o "$OUT/$w/$w.parquet" --keep-raw -- \
        python3 bench/whatif/harness.py "$w" serve --passes 2
done
if PYTHONPATH=$PWD/.devsite:$PYTHONPATH python3 -c "import polars" 2>/dev/null; then
    mkdir -p "$OUT/rot" "$OUT/one"
    (export PYTHONPATH=$PWD/.devsite:$PYTHONPATH
     run 150 python3 bench/device/zym_lean.py -o "$OUT/rot/gpt.parquet" --rotate 4 -- \
        python3 bench/whatif/harness.py gpt_decode serve --passes 60)
    [ -n "${SKIP_ONE:-}" ] || run 120 python3 bench/device/zym_lean.py -o "$OUT/one/gpt.parquet" --keep-raw -- \
        python3 bench/whatif/harness.py gpt_decode serve --passes 60
else
    echo "== no polars in .devsite (a fresh machine?): rotate check skipped"
fi
for d in ${WORKLOADS:-vision moe} rot one; do
    [ -d "$OUT/$d" ] && tar czf "$OUT/$d.tgz" -C "$OUT" "$d" && rm -rf "${OUT:?}/$d"
done
ls -la "$OUT"
echo "total ${SECONDS}s"
