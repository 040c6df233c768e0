#!/usr/bin/env bash
# Where does a capture's CPU time come from? The same workload's timed passes (after a warm-up
# pass), in one process per arm, arms interleaved round by round:
#   plain  no instrumentation
#   cupti  zym's CUPTI collector alone (GPU records + launch/copy/sync API records)
#   gpu    zym's CUPTI collector with GPU records only (ZYM_CUPTI_ALL_APIS=0)
#   ebpf   zym's eBPF session alone (bench/device/zym_lean.py --no-cupti)
#   full   zym capture (eBPF + CUPTI, defaults)
# Each arm writes ARM-WORKLOAD-ROUND.json (bench/whatif/harness.py serve --times), gathered
# into OUT/inflation.json at the end.
# Run from the repository root with carry [".carry"]. Report: bench/whatif/inflation.py.
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-420}
ARMS=${ARMS:-"plain cupti gpu ebpf full"}
ROUNDS=${ROUNDS:-7}
WORKLOADS=${WORKLOADS:-"gpt_decode decode_loop"}
BOOT=$PWD/capture/cupti/bootstrap
H=bench/whatif/harness.py
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
arm() {  # arm NAME WORKLOAD ROUND
    local name=$1 w=$2 r=$3 t="$OUT/$1-$2-$3.json" spool=/tmp/spool-$1-$2-$3
    case $name in
        plain) timeout 90 python3 $H "$w" serve --passes 3 --times "$t" ;;
        cupti) mkdir -p $spool; PYTHONPATH=$BOOT:$PYTHONPATH ZYM_CUPTI_DIR=$spool \
                   timeout 90 python3 $H "$w" serve --passes 3 --times "$t" ;;
        gpu) mkdir -p $spool; PYTHONPATH=$BOOT:$PYTHONPATH ZYM_CUPTI_DIR=$spool ZYM_CUPTI_ALL_APIS=0 \
                   timeout 90 python3 $H "$w" serve --passes 3 --times "$t" ;;
        ebpf) timeout 120 python3 bench/device/zym_lean.py --no-cupti -o /tmp/c-$name-$w-$r.parquet \
                   -- python3 $H "$w" serve --passes 3 --times "$t" >/dev/null ;;
        full) timeout 120 python3 bench/device/zym_lean.py -o /tmp/c-$name-$w-$r.parquet \
                   -- python3 $H "$w" serve --passes 3 --times "$t" >/dev/null ;;
    esac
    rm -rf $spool /tmp/c-$name-$w-$r.parquet*
}
for r in $(seq 1 "$ROUNDS"); do
    for w in $WORKLOADS; do
        for name in $ARMS; do
            if [ $(( DEADLINE - SECONDS )) -lt 40 ]; then echo "deadline at round $r"; break 3; fi
            arm $name "$w" "$r" 2>&1 | tail -2
        done
    done
    echo "round $r done at ${SECONDS}s"
done
# one file back (the device returns a few files per call)
python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
runs = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*-*-*.json"))}
(out / "inflation.json").write_text(json.dumps(runs))
for p in out.glob("*-*-*.json"):
    p.unlink()
print(len(runs), "runs")
PY
