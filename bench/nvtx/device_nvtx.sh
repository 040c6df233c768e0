#!/usr/bin/env bash
# Device call: NVTX ranges in zym captures on the H200 (issue 16, "a process with NVTX ranges").
# Carry [".carry"] (../shared/device/fetch-carry.sh .carry). On the device machine zym is not
# installed and polars is absent: captures are kept raw (bench/device/zym_lean.py) and
# finalized here:
#   for f in ranges emit nonvtx attach; do
#     zym capture --finalize nvtx/$f.parquet.raw -o nvtx/$f.parquet
#     python3 bench/nvtx/check_nvtx.py nvtx/$f.parquet
#   done
# Runs (bench/nvtx/nvtx_workload.py, a 4-layer transformer encoder, 16x128x512):
# 1. floor: each mode without zym (step times: $OUT/nvtx/floor-*.json);
# 2. ranges: torch.cuda.nvtx.range around steps/phases and on a background thread, captured;
# 3. nonvtx: the same with ZYM_NVTX=0 (what recording NVTX costs: compare with 2);
# 4. emit: under torch.autograd.profiler.emit_nvtx(), captured;
# 5. attach: started as `zym run --nvtx` does (ZYM_AGENT=1 ZYM_AGENT_NVTX=1), attached 5 s.
# One run each: step-time figures are indicative only (no interleaved pairs).
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
W=bench/nvtx/nvtx_workload.py
BOOT=$PWD/capture/cupti/bootstrap
R=$OUT/nvtx; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
wait_file() { for _ in $(seq 1 ${2:-600}); do [ -e "$1" ] && return 0; sleep 0.1; done; echo "timeout waiting for $1"; return 1; }
capture() {  # capture NAME MODE [ENV=...]
    local name=$1 mode=$2; shift 2
    echo "== ${SECONDS}s capture $name ($mode)"
    env "$@" timeout 240 python3 bench/device/zym_lean.py -o $R/$name.parquet -- \
        python3 $W $mode --steps 40 --out $R/$name-steps.json 2>&1 | tail -4
}
for mode in plain ranges emit; do
    echo "== ${SECONDS}s floor $mode"
    timeout 120 python3 $W $mode --steps 40 --out $R/floor-$mode.json | tail -1
done
capture ranges ranges ZYM_NVTX=1
capture nonvtx ranges ZYM_NVTX=0
capture emit emit ZYM_NVTX=1
if [ $SECONDS -lt 420 ]; then
    echo "== ${SECONDS}s attach"
    rm -f /tmp/ready-nvtx
    PYTHONPATH=$BOOT:$PYTHONPATH ZYM_AGENT=1 ZYM_AGENT_NVTX=1 \
        python3 $W ranges --seconds 20 --ready /tmp/ready-nvtx --out $R/attach-steps.json &
    P=$!
    if wait_file /tmp/ready-nvtx 1200; then
        cp /tmp/zym-agent/$P/state $R/attach-state-dormant.json 2>/dev/null
        sleep 2
        timeout 90 python3 bench/device/zym_lean.py -o $R/attach.parquet --pid $P --duration 5 2>&1 | tail -3
    fi
    wait $P; echo "attach target exit $?"
else
    echo "skip attach (time)"
fi
du -sh $R
tar czf - -C $OUT nvtx | split -b 15m - $OUT/nvtx.tgz.   # files back: 16 MiB each at most
rm -rf $R; ls -la $OUT
echo "total ${SECONDS}s"
