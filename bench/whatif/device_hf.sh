#!/usr/bin/env bash
# Device call for the blind round's Hugging Face workload (bench/whatif/workloads/hf_generate.py):
# its variants measured (15 interleaved rounds), a torch.profiler trace and a zym capture
# (eBPF + CUPTI, raw kept) of the baseline. Carry: [".carry"].
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
DEADLINE=${DEADLINE:-520}
source bench/device/run_step.sh
RUN_TAIL=12
python3 -c "import transformers; print('transformers', transformers.__version__)"
run 240 python3 bench/whatif/harness.py hf_generate measure "$OUT/hf_generate.measure.json" --rounds 15
run 90 python3 bench/whatif/harness.py hf_generate trace "$OUT/hf_generate.trace.json" --passes 1 \
    && gzip -1 "$OUT/hf_generate.trace.json"
mkdir -p "$OUT/hf"
run 150 python3 bench/device/zym_lean.py -o "$OUT/hf/hf_generate.parquet" --keep-raw -- \
    python3 bench/whatif/harness.py hf_generate serve --passes 2
tar czf "$OUT/hf.tgz" -C "$OUT" hf && rm -rf "${OUT:?}/hf"
ls -la "$OUT"
echo "total ${SECONDS}s"
