#!/usr/bin/env bash
# Device call 3: overhead benchmark, one run: no profiler / zym's CUPTI collector / torch.profiler
# with stacks (and CUPTI with every API callback, for the narrowing's effect), alternated.
B=$PWD/capture/cupti/bootstrap
W=sample_traces/gpt_decode_server.py
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
run() {  # label, env assignments, extra args
  local ms
  ms=$(env $2 timeout 200 python3 $W --batches 30 $3 | sed -n 's/ ms per batch//p')
  echo "$1 $ms" | tee -a $OUT/bench.txt
}
run warmup "PYTHONPATH=" ""
for rep in 1 2 3 4 5; do
  run none "PYTHONPATH=" ""
  run cupti "PYTHONPATH=$B ZYM_CUPTI_DIR=/tmp/bench$rep" ""
  if [ $rep -le 3 ]; then run torch_profiler_stacks "PYTHONPATH=" "--trace /tmp/tp$rep.json"; fi
done
run cupti_all_apis "PYTHONPATH=$B ZYM_CUPTI_DIR=/tmp/benchall1 ZYM_CUPTI_ALL_APIS=1" ""
run cupti_all_apis "PYTHONPATH=$B ZYM_CUPTI_DIR=/tmp/benchall2 ZYM_CUPTI_ALL_APIS=1" ""
python3 - <<'PY' | tee $OUT/footers.txt
import glob, json, sys
sys.path.insert(0, "capture/cupti")
import agent
for d in sorted(glob.glob("/tmp/bench*")):
    for f in glob.glob(d + "/*.spool"):
        chunks = list(agent.read_chunks(f))
        foot = [json.loads(p) for k, _, p in chunks if k == "footer"]
        head = [json.loads(p) for k, _, p in chunks if k == "header"]
        n = sum(1 for k, _, _ in chunks if k == "activity")
        f0 = foot[0] if foot else {}
        print(d, json.dumps({k: f0.get(k) for k in ("buffers", "bytes", "dropped", "callback_ns", "stop_ns")}),
              "setup_ns", head[0].get("setup_ns") if head else None)
PY
