#!/usr/bin/env bash
# One device call: why zym's replay of a GPU fix (TF32 on gpt_decode and rerank) goes CPU-bound
# too early. What torch.profiler adds to passes of the baselines and of their TF32 variants
# (bound by the CPU once the GEMMs are fast: bench/whatif/traced_cost.py), then
# torch.profiler traces of gpt_decode's baseline and TF32 variant (does the traced CPU time
# per call change when the GPU gets faster?). Results: $OUT (kept in
# bench/whatif/results/<card>-cpu-floor/). Run from the repository root; no carry.
DEADLINE=${DEADLINE:-540}
RUN_TAIL=12
source bench/whatif/device_preamble.sh
run 300 python3 bench/whatif/traced_cost.py "$OUT/traced_cost.json" gpt_decode:base \
    gpt_decode:tf32 rerank:base rerank:tf32
for v in base tf32; do
    run 90 $H gpt_decode trace "$OUT/gpt_decode-$v.trace.json" --passes 1 --variant "$v" \
        && gzip -1 "$OUT/gpt_decode-$v.trace.json"
done
ls -la "$OUT"
echo "total ${SECONDS}s"
