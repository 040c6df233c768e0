#!/usr/bin/env bash
# Device call 1 of 2 for the predicted-vs-measured table (docs/benchmarks.md, "What fixing a
# finding saves"): a zym capture (eBPF + CUPTI, raw: finalized on the dev machine) and a
# torch.profiler trace of each workload's baseline, and a zym capture of a torch.compile run.
# Run from the repository root with carry [".carry"] (../shared/device/fetch-carry.sh).
# Then here: bench/whatif/finalize.sh FILES_AT
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cap() {  # cap NAME -- command...: a raw zym capture into $OUT/NAME/
    local name=$1; shift 2
    mkdir -p "$OUT/$name"
    timeout 170 python3 tests/cupti/device/combined_driver.py "$OUT/$name/$name.parquet" -- "$@" \
        2>&1 | tail -4
}
for w in gpt_decode rerank decode_loop; do
    cap "$w" -- python3 bench/whatif/harness.py "$w" serve --passes 2
    timeout 120 python3 bench/whatif/harness.py "$w" trace "$OUT/$w/$w.trace.json" --passes 2 \
        && gzip -1 "$OUT/$w/$w.trace.json"
done
cap compiled -- python3 bench/whatif/harness.py compiled serve --passes 3
timeout 150 python3 bench/whatif/calibrate.py "$OUT/calibration2.json" graph,gemm,profiler_micro | tail -80
for d in gpt_decode rerank decode_loop compiled; do
    tar czf "$OUT/$d.tgz" -C "$OUT" "$d" && rm -rf "${OUT:?}/$d"
done
ls -la "$OUT"
