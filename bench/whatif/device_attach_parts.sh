#!/usr/bin/env bash
# Device call: what each side of an attach costs a running service, in one process, in turn:
# before, eBPF alone (zym capture --pid --no-cupti), CUPTI alone (the dormant agent switched on
# through its control file, no probes), both (zym capture --pid), after; every pass timed
# (harness.py soak) and each phase's monotonic bounds logged (phases.json).
# Carry [".carry"]. Workloads: gpt_decode (GPU-bound transformer), decode_loop (launch-bound).
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
BOOT=$PWD/capture/cupti/bootstrap
H=bench/whatif/harness.py
R=$OUT/parts; mkdir -p $R
PH=${PH:-6}
mono() { python3 -c 'import time; print(time.monotonic_ns())'; }
mark() { echo "{\"w\": \"$1\", \"phase\": \"$2\", \"edge\": \"$3\", \"t\": $(mono)}," >> $R/phases.json; }
switch() {  # switch PID on|off SPOOL: the agent's control file, as zym capture writes it
    python3 - "$@" <<'PY'
import json, os, sys, time
pid, action, spool = sys.argv[1], sys.argv[2], sys.argv[3]
d = f"/tmp/zym-agent/{pid}"
seq = json.load(open(f"{d}/state"))["seq"] + 1
open(f"{d}/.c", "w").write(json.dumps({"seq": seq, "action": action, "spool_dir": spool}))
os.replace(f"{d}/.c", f"{d}/control")
for _ in range(200):
    st = json.load(open(f"{d}/state"))
    if st["seq"] == seq:
        print(action, st["state"], st.get("errors")); break
    time.sleep(0.05)
PY
}
for w in ${WORKLOADS:-gpt_decode decode_loop}; do
    rm -f /tmp/stop-$w
    PYTHONPATH=$BOOT:$PYTHONPATH ZYM_AGENT=1 python3 $H $w soak $R/soak-$w.json --stop /tmp/stop-$w &
    P=$!
    for _ in $(seq 1 600); do [ -f /tmp/zym-agent/$P/state ] && break; sleep 0.1; done
    sleep 3
    mark $w before end
    timeout 60 python3 bench/device/zym_lean.py --no-cupti -o /tmp/e-$w.parquet --pid $P --duration $PH 2>&1 | grep -c tracking
    mark $w ebpf end; sleep 2; mkdir -p /tmp/sp-$w; chmod 777 /tmp/sp-$w
    mark $w cupti start; switch $P on /tmp/sp-$w; sleep $PH; switch $P off x; mark $w cupti end
    sleep 2
    timeout 60 python3 bench/device/zym_lean.py -o /tmp/b-$w.parquet --pid $P --duration $PH 2>&1 | grep -c tracking
    mark $w both end; sleep $PH; mark $w after end
    touch /tmp/stop-$w; wait $P
    cp -r /tmp/e-$w.parquet.raw $R/ebpf-$w.raw; cp -r /tmp/b-$w.parquet.raw $R/both-$w.raw
    cp /tmp/b-$w.parquet.cupti/gpu_window.json $R/both-window-$w.json 2>/dev/null
done
tar czf - -C $OUT parts | split -b 15m - $OUT/parts.tgz.   # 16 MiB a file comes back
rm -rf $R; ls -la $OUT
