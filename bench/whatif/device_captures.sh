#!/usr/bin/env bash
# Device call 1 of 2 for the predicted-vs-measured table (docs/benchmarks.md, "What fixing a
# finding saves"): a zym capture (eBPF + CUPTI, defaults; raw, finalized on the dev machine)
# and a torch.profiler trace of each workload's baseline, a zym capture of a torch.compile run,
# and the calibration constants the replay takes from the hardware. Stages past the deadline
# are skipped, so the call ends inside its limit.
# Run from the repository root with carry [".carry"] (../shared/device/fetch-carry.sh).
# Then here: bash bench/whatif/finalize.sh FILES_AT
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-520}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
RUN_TAIL=6
source bench/device/run_step.sh
for w in gpt_decode rerank decode_loop; do
    mkdir -p "$OUT/$w"
    run 120 python3 bench/device/zym_lean.py -o "$OUT/$w/$w.parquet" --keep-raw -- \
        python3 bench/whatif/harness.py "$w" serve --passes 2
done
run 120 python3 bench/whatif/calibrate.py "$OUT/calibration2.json" graph,gemm,profiler_micro
for w in gpt_decode rerank decode_loop; do
    run 90 python3 bench/whatif/harness.py "$w" trace "$OUT/$w/$w.trace.json" --passes 1 \
        && gzip -1 "$OUT/$w/$w.trace.json"
done
mkdir -p "$OUT/compiled"
run 150 python3 bench/device/zym_lean.py -o "$OUT/compiled/compiled.parquet" --keep-raw -- \
    python3 bench/whatif/harness.py compiled serve --passes 3
for d in gpt_decode rerank decode_loop compiled; do
    tar czf "$OUT/$d.tgz" -C "$OUT" "$d" && rm -rf "${OUT:?}/$d"
done
ls -la "$OUT"
echo "total ${SECONDS}s"
