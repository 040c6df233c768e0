#!/usr/bin/env bash
# Device call: zym captures (eBPF + CUPTI, defaults) of the three what-if workloads, the
# torch.compile run and the bundled sample (gpt_decode_server.py --batches 5), with the
# collector's walk through C-stack entry frames fixed (no truncated stacks). Raw: finalized on
# the dev machine. Carry [".carry"].
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
cap() {  # cap NAME -- COMMAND...
    local name=$1; shift 2
    mkdir -p "$OUT/$name"
    timeout 150 python3 bench/device/zym_lean.py -o "$OUT/$name/$name.parquet" --keep-raw -- "$@" \
        2>&1 | tail -2
}
cap gpt5 -- python3 sample_traces/gpt_decode_server.py --batches 5
for w in gpt_decode rerank decode_loop; do
    cap "$w" -- python3 bench/whatif/harness.py "$w" serve --passes 2
done
cap compiled -- python3 bench/whatif/harness.py compiled serve --passes 3
for d in gpt5 gpt_decode rerank decode_loop compiled; do
    tar czf "$OUT/$d.tgz" -C "$OUT" "$d" && rm -rf "${OUT:?}/$d"
done
ls -la "$OUT"; echo "total ${SECONDS}s"
