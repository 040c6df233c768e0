#!/usr/bin/env bash
# Device call: does an attached CUPTI session cost less without API records? gpt_decode served
# with the dormant agent; CUPTI switched on (no eBPF) with GPU records only ("apis": "0") and
# with zym's default API records, alternately, 4 s each, 2 s dormant between; every pass timed.
set -uo pipefail
export PYTHONUNBUFFERED=1
BOOT=$PWD/capture/cupti/bootstrap
R=$OUT/apis; mkdir -p $R; rm -f /tmp/stop-a
mono() { python3 -c 'import time; print(time.monotonic_ns())'; }
switch() { python3 - "$@" <<'PY'
import json, os, sys, time
pid, action, spool, apis = sys.argv[1:5]
d = f"/tmp/zym-agent/{pid}"
seq = json.load(open(f"{d}/state"))["seq"] + 1
open(f"{d}/.c", "w").write(json.dumps({"seq": seq, "action": action, "spool_dir": spool,
                                        "apis": None if apis == "default" else apis}))
os.replace(f"{d}/.c", f"{d}/control")
for _ in range(200):
    if json.load(open(f"{d}/state"))["seq"] == seq:
        break
    time.sleep(0.05)
PY
}
PYTHONPATH=$BOOT:$PYTHONPATH ZYM_AGENT=1 python3 bench/whatif/harness.py gpt_decode soak $R/soak.json --stop /tmp/stop-a &
P=$!
for _ in $(seq 1 600); do [ -f /tmp/zym-agent/$P/state ] && break; sleep 0.1; done
sleep 3
for i in 1 2; do for apis in 0 default; do
    mkdir -p /tmp/sp-$apis-$i
    echo "{\"apis\": \"$apis\", \"round\": $i, \"on\": $(mono)," >> $R/phases.txt
    switch $P on /tmp/sp-$apis-$i $apis; sleep 4; switch $P off x x
    echo "\"off\": $(mono)}" >> $R/phases.txt; sleep 2
done; done
touch /tmp/stop-a; wait $P
tar czf $OUT/apis.tgz -C $OUT apis && rm -rf $R
