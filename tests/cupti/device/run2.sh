#!/usr/bin/env bash
# Device call 2: a real 5-batch capture (uprobe calls + CUPTI, for the join on real timings),
# a torch.profiler trace of the same 5 batches, and the overhead benchmark (one run, alternated).
set -x
source .carry/on-device.sh .carry
B=$PWD/capture/cupti/bootstrap
W=sample_traces/gpt_decode_server.py
mkdir -p $OUT/real
timeout 240 python3 tests/cupti/device/uprobe_calls.py $OUT/real/ebpf_calls.arrow -- \
  env PYTHONPATH=$B:$PYTHONPATH ZYM_CUPTI_DIR=$OUT/real python3 $W --batches 5
timeout 120 python3 $W --batches 5 --trace /tmp/kineto5.json && gzip -c /tmp/kineto5.json > $OUT/kineto5.json.gz
ls -la $OUT/real $OUT
run() {  # label, env assignments, extra args; appends "label ms" to bench.txt
  local ms
  ms=$(env $2 timeout 200 python3 $W --batches 20 $3 | sed -n 's/ ms per batch//p')
  echo "$1 $ms" | tee -a $OUT/bench.txt
}
for rep in 1 2 3; do
  run none "PYTHONPATH=" ""
  run cupti "PYTHONPATH=$B ZYM_CUPTI_DIR=/tmp/bench$rep" ""
  run torch_profiler_stacks "PYTHONPATH=" "--trace /tmp/tp$rep.json"
done
run cupti_all_apis "PYTHONPATH=$B ZYM_CUPTI_DIR=/tmp/benchall ZYM_CUPTI_ALL_APIS=1" ""
python3 - <<'PY'
import glob, json, sys
sys.path.insert(0, "capture/cupti")
import agent
for d in sorted(glob.glob("/tmp/bench*")):
    for f in glob.glob(d + "/*.spool"):
        foot = [json.loads(p) for k, _, p in agent.read_chunks(f) if k == "footer"]
        print(d, json.dumps(foot[0] if foot else None)[:600])
PY
