#!/usr/bin/env bash
# Device call: zym's dormant agent on the H200.
# 1. soak: the gpt_decode service (a transformer) started with the agent dormant (what `zym
#    run` does), every pass timed; after 10 s an 8 s `zym capture --pid`, 5 s off, a second
#    8 s capture, 10 s off: GPU time per call path while attached, and the service's speed
#    before, during and after (soak.json: monotonic start and seconds of each pass).
# 2. paired, per workload: half the measure rounds, then the baseline served while a
#    `zym capture --pid` records it, then the other half, all in one process: the prediction
#    and the measurement share the process and the moment (harness.py paired).
# Carry [".carry"]. Raw captures (and their .cupti spools) finalized on the dev machine.
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
BOOT=$PWD/capture/cupti/bootstrap
H=bench/whatif/harness.py
R=$OUT/att; mkdir -p $R
mono() { python3 -c 'import time; print(time.monotonic_ns())'; }
wait_file() { for _ in $(seq 1 ${2:-600}); do [ -e "$1" ] && return 0; sleep 0.1; done; echo "timeout waiting for $1"; return 1; }
attach() {  # attach PID OUT SECONDS
    echo "== ${SECONDS}s attach $1 -> $2 ($3 s)"
    timeout 90 python3 bench/device/zym_lean.py -o "$2" --pid "$1" --duration "$3" 2>&1 \
        | grep -v "cannot finalize" | tail -3
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rm -f /tmp/stop-soak
PYTHONPATH=$BOOT:$PYTHONPATH ZYM_AGENT=1 python3 $H gpt_decode soak $R/soak.json --stop /tmp/stop-soak &
P=$!
wait_file /tmp/zym-agent/$P/state 600 && cp /tmp/zym-agent/$P/state $R/soak-state-dormant.json
sleep 10
mkdir -p $R/attach1 $R/attach2
attach $P $R/attach1/attach1.parquet 8
sleep 5
attach $P $R/attach2/attach2.parquet 8
sleep 10
touch /tmp/stop-soak; wait $P; echo "soak exit $?"
cp /tmp/zym-agent/$P/state $R/soak-state-end.json
for spec in gpt_decode:4 rerank:3 decode_loop:2; do
    w=${spec%%:*}; d=${spec##*:}
    [ $SECONDS -gt 480 ] && { echo "skip $w (time)"; continue; }
    rm -f /tmp/ready-$w /tmp/stop-$w; mkdir -p $R/$w
    PYTHONPATH=$BOOT:$PYTHONPATH ZYM_AGENT=1 python3 $H $w paired $R/$w.measure.json --rounds 8 \
        --ready /tmp/ready-$w --stop /tmp/stop-$w | tail -8 &
    P=$!
    if wait_file /tmp/ready-$w 1200; then
        sleep 1
        attach $(pgrep -f "harness.py $w paired" | head -1) $R/$w/$w.parquet $d
    fi
    touch /tmp/stop-$w; wait $P
done
tar czf - -C $OUT att | split -b 15m - $OUT/attach.tgz.   # files back: 16 MiB each at most
rm -rf $R; ls -la $OUT
echo "total ${SECONDS}s"
