#!/usr/bin/env bash
# What each side of `zym capture` adds to a request, end to end, on the H200: per workload,
# whole `harness.py W serve --passes P --times` runs (a warm-up pass, then P timed passes), in
# rounds; each round runs every arm once, the arms' order rotated round to round:
#   P   plain
#   E   eBPF probes only (zym_lean --no-cupti)
#   C   CUPTI agent only, as zym capture starts it (bootstrap on PYTHONPATH, default records)
#   C0  CUPTI agent only, without its runtime/driver API records (ZYM_CUPTI_ALL_APIS=0)
#   Z   zym capture: both (zym_lean)
# Every process pinned to the same CPUs. Stops starting rounds DEADLINE s into the call.
#   bash bench/whatif/device_overhead_parts.sh "W1:P1 W2:P2" [ROUNDS] [ARMS]   (carry .carry)
# Writes $OUT/parts.json ({run: {workload, arm, round, pass_s, requests_per_pass}}) and, per
# workload, the round-1 raw captures' meta (E, Z) in $OUT/raw-meta.tgz.
set -uo pipefail
specs=${1:?usage: device_overhead_parts.sh "W:PASSES ..." [ROUNDS] [ARMS]}
rounds=${2:-7}
arms=(${3:-P E C C0 Z})
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
DEADLINE=${DEADLINE:-540}
CPUS=${CPUS:-2-13}
BOOT=$PWD/capture/cupti/bootstrap
T=/tmp/parts; rm -rf $T; mkdir -p $T/meta
echo "CPUs: $CPUS; $(lscpu | grep -iE '^(NUMA node|Thread|Core|Socket)' | tr -s ' ' | tr '\n' ';')"
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null | head -1 | tr 'A-F' 'a-f')
[ -n "$bus" ] && echo "GPU ${bus}: local CPUs $(cat /sys/bus/pci/devices/${bus#0000}/local_cpulist 2>/dev/null || cat /sys/bus/pci/devices/${bus:4}/local_cpulist 2>/dev/null)"
one() {  # workload passes arm round
  local w=$1 p=$2 arm=$3 r=$4 times=$T/$1-$3-$4.json
  local serve=(python3 bench/whatif/harness.py "$w" serve --passes "$p" --times "$times")
  local t0=$SECONDS
  case $arm in
    P) timeout 150 taskset -c $CPUS "${serve[@]}" >/dev/null 2>&1 ;;
    C|C0) rm -rf $T/spool; mkdir -p $T/spool
       env PYTHONPATH=$BOOT ZYM_CUPTI_DIR=$T/spool $([ $arm = C0 ] && echo ZYM_CUPTI_ALL_APIS=0) \
         timeout 150 taskset -c $CPUS "${serve[@]}" >/dev/null 2>&1 ;;
    E|Z) rm -rf $T/cap*; timeout 200 taskset -c $CPUS python3 bench/device/zym_lean.py -o $T/cap.parquet \
         $([ $arm = E ] && echo --no-cupti) -- "${serve[@]}" >$T/lean.log 2>&1
       [ "$r" = 1 ] && cp $T/cap.parquet.raw/meta.json $T/meta/$w-$arm.meta.json 2>/dev/null ;;
  esac
  echo "$w $arm r$r $((SECONDS - t0))s $(python3 -c "import json,sys,statistics as s; d=json.load(open('$times')); print(round(s.median(d['pass_s'])*1e3,2),'ms')" 2>/dev/null || echo FAILED)"
}
for r in $(seq 1 "$rounds"); do
  [ $SECONDS -gt $DEADLINE ] && { echo "deadline: stopped before round $r"; break; }
  n=${#arms[@]}
  for spec in $specs; do
    w=${spec%%:*}; p=${spec##*:}
    for k in $(seq 0 $((n - 1))); do one "$w" "$p" "${arms[$(( (k + r) % n ))]}" "$r"; done
  done
done
python3 - "$T" "$OUT/parts.json" <<'PY'
import json, sys, pathlib
t = pathlib.Path(sys.argv[1]); out = {}
for f in sorted(t.glob("*.json")):
    w, arm, r = f.stem.rsplit("-", 2)
    d = json.loads(f.read_text())
    out[f.stem] = {"workload": w, "arm": arm, "round": int(r), "pass_s": d["pass_s"],
                   "requests_per_pass": d.get("requests_per_pass")}
pathlib.Path(sys.argv[2]).write_text(json.dumps(out, indent=1))
PY
tar czf $OUT/raw-meta.tgz -C $T meta
echo "total ${SECONDS}s"
