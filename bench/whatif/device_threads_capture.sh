#!/usr/bin/env bash
# One device call: a zym capture (eBPF + CUPTI, raw kept, finalized on the dev machine) of the
# sidecar service's baseline, and its variants measured again in the same call
# (bench/whatif/results/h200-threads/). Carry: [".carry"] (../shared/device/fetch-carry.sh);
# the tree and the carry must fit the device call's 64 MiB: run it from a sparse checkout
# without bench/whatif/results/, sample_traces/ and bench/diff/.
source .carry/on-device.sh .carry >/dev/null 2>&1
DEADLINE=${DEADLINE:-420}
RUN_TAIL=10
source bench/whatif/device_preamble.sh
run 150 $H sidecar measure "$OUT/sidecar.measure-capture.json" --rounds 41 \
    --variants base,main_gpu,bg_batched,graphed
mkdir -p "$OUT/sidecar"
run 150 python3 bench/device/zym_lean.py -o "$OUT/sidecar/sidecar.parquet" --keep-raw -- \
    $H sidecar serve --passes 3
tar czf "$OUT/sidecar.tgz" -C "$OUT" sidecar && rm -rf "${OUT:?}/sidecar"
ls -la "$OUT"; echo "total ${SECONDS}s"
