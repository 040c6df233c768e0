#!/usr/bin/env bash
# Device call 2 for hf_generate: the baseline against the fix zym's top finding names (a static
# cache with torch.compile, mode="reduce-overhead"), 9 interleaved rounds after each variant's
# warm-up (compilation included there, not in the timed passes). Needs only torch.
set -uo pipefail
export PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
timeout 500 python3 bench/whatif/harness.py hf_generate measure "$OUT/hf_generate.measure2.json" \
    --rounds 9 --variants base,static_compile 2>&1 | tail -15
ls -la "$OUT"; echo "total ${SECONDS}s"
