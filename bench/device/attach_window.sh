#!/usr/bin/env bash
# Device call: two `zym capture --pid` attaches (8 s each, 5 s apart) to the gpt_decode service
# started with zym's dormant agent; the raw captures and CUPTI spools come back, to be finalized
# on the dev machine by two zym trees (what the CUPTI window keeps, before and after a change).
# usage: bench/device/attach_window.sh CARRY_DIR (BCC and the wheels, as fetch-carry.sh makes)
set -uo pipefail
source "$1/on-device.sh" "$1" >/dev/null 2>&1
export PYTHONUNBUFFERED=1
BOOT=$PWD/capture/cupti/bootstrap
R=$OUT/att; mkdir -p $R
wait_file() { for _ in $(seq 1 ${2:-600}); do [ -e "$1" ] && return 0; sleep 0.1; done; echo "timeout waiting for $1"; return 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rm -f /tmp/stop-soak
PYTHONPATH=$BOOT:$PYTHONPATH ZYM_AGENT=1 python3 bench/whatif/harness.py gpt_decode soak \
    $R/soak.json --stop /tmp/stop-soak > $R/soak.log 2>&1 &
P=$!
wait_file /tmp/zym-agent/$P/state 600 || { tail -5 $R/soak.log; exit 1; }
sleep 8
for i in 1 2; do
    mkdir -p $R/attach$i
    echo "== ${SECONDS}s attach $i"
    timeout 90 python3 bench/device/zym_lean.py -o $R/attach$i/attach$i.parquet --pid $P \
        --duration 8 2>&1 | grep -v "cannot finalize" | tail -3
    sleep 5
done
touch /tmp/stop-soak; wait $P; echo "soak exit $?"
tail -3 $R/soak.log
tar czf - -C $OUT att | split -b 15m - $OUT/attach.tgz.
rm -rf $R; ls -la $OUT; echo "total ${SECONDS}s"
