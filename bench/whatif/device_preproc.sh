#!/usr/bin/env bash
# Device call for the blind round's preproc workload (bench/whatif/workloads/preproc.py):
# variants measured (15 interleaved rounds), a zym capture (eBPF + CUPTI, raw kept) and a
# torch.profiler trace of the baseline. Carry: [".carry"].
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-240}
source bench/device/run_step.sh
RUN_TAIL=6
run 100 python3 bench/whatif/harness.py preproc measure "$OUT/preproc.measure.json" --rounds 15
run 50 python3 bench/whatif/harness.py preproc trace "$OUT/preproc.trace.json" --passes 1 \
    && gzip -1 "$OUT/preproc.trace.json"
mkdir -p "$OUT/preproc"
run 80 python3 bench/device/zym_lean.py -o "$OUT/preproc/preproc.parquet" --keep-raw -- \
    python3 bench/whatif/harness.py preproc serve --passes 2
tar czf "$OUT/preproc.tgz" -C "$OUT" preproc && rm -rf "${OUT:?}/preproc"
ls -la "$OUT"; echo "total ${SECONDS}s"
