#!/usr/bin/env bash
# What `zym capture` (eBPF + CUPTI) adds to a request, end to end, on the blind round's
# vision and moe services: each run serves a warm-up pass then 8 timed passes
# (harness.py serve --times); plain and captured runs alternate, 3 pairs per workload, the
# order flipped every pair. Merged into $OUT/overhead.json. Carry: [".carry"].
set -uo pipefail
source .carry/on-device.sh .carry >/dev/null 2>&1
export PYTHONUNBUFFERED=1
T=/tmp/ovh; rm -rf $T; mkdir -p $T
for w in vision moe; do
  for i in 1 2 3; do
    arms="plain zym"; [ $((i % 2)) -eq 0 ] && arms="zym plain"
    for arm in $arms; do
      if [ $arm = plain ]; then
        timeout 120 python3 bench/whatif/harness.py $w serve --passes 8 --times $T/$w-plain-$i.json
      else
        timeout 150 python3 bench/device/zym_lean.py -o $T/$w-$i.parquet -- \
          python3 bench/whatif/harness.py $w serve --passes 8 --times $T/$w-zym-$i.json 2>&1 | grep -E "probes|trap" | head -2
      fi
      echo "$w $arm $i at ${SECONDS}s"
    done
  done
done
python3 - "$T" "$OUT/overhead.json" <<'PY'
import json, sys, pathlib
t = pathlib.Path(sys.argv[1]); out = {}
for f in sorted(t.glob("*.json")):
    out[f.stem] = json.loads(f.read_text())
pathlib.Path(sys.argv[2]).write_text(json.dumps(out, indent=1))
print({k: round(sorted(v["pass_s"])[len(v["pass_s"]) // 2] * 1e3, 2) for k, v in out.items()})
PY
echo "total ${SECONDS}s"
