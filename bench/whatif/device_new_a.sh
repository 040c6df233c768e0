#!/usr/bin/env bash
# Device call A for the blind round (workloads written before zym saw them: vision, moe):
# every variant measured (harness.py measure, 15 rounds, interleaved in one process), a
# torch.profiler trace of each baseline; and polars unpacked into .devsite/ (ignored: kept on
# the machine for call B, bench/whatif/device_new_b.sh, which must follow within its idle time).
# Carry: [".carry-pol"] (polars, polars-runtime-32, msgspec wheels for Python 3.12).
set -uo pipefail
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-540}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
source bench/device/run_step.sh
RUN_TAIL=12
mkdir -p .devsite
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target .devsite .carry-pol/*.whl && PYTHONPATH=.devsite python3 -c "import polars; print('polars', polars.__version__)"
for w in ${WORKLOADS:-vision moe}; do
    run 200 python3 bench/whatif/harness.py "$w" measure "$OUT/$w.measure.json" --rounds 15
done
for w in ${WORKLOADS:-vision moe}; do
    run 90 python3 bench/whatif/harness.py "$w" trace "$OUT/$w.trace.json" --passes 1 \
        && gzip -1 "$OUT/$w.trace.json"
done
ls -la "$OUT"
echo "total ${SECONDS}s"
