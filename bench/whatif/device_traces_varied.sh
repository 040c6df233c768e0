#!/usr/bin/env bash
# One device call: torch.profiler traces of the workloads with settings no earlier trace here
# used (memory events, FLOPs, the schedule + tensorboard_trace_handler pattern of torch's docs,
# no stacks, torch.compile's CUDA graphs) and one long real trace (many passes, stacks and
# shapes), for `zym analyze` robustness and size checks on the dev machine
# (bench/whatif/results/h200-varied/). Run from the repository root; no carry needed.
DEADLINE=${DEADLINE:-540}
RUN_TAIL=6
source bench/whatif/device_preamble.sh
t() { run "$1" $H "$2" trace "$OUT/$3" --passes "$4" --trace-opts "$5" ${6:-} && { [ -d "$OUT/$3" ] || gzip -1 "$OUT/$3"; }; }
t 90 hf_generate hf_generate-memflops.trace.json 1 stack,shapes,memory,flops
t 90 moe moe-nostack.trace.json 2 shapes
t 120 vision vision-schedule 3 stack,shapes,schedule
t 150 compiled compiled.trace.json 2 stack,shapes
t 90 churn churn-memory.trace.json 2 stack,memory
t 150 decode_loop decode_loop-long.trace.json 12 stack,shapes
ls -laR "$OUT" | head -40
echo "total ${SECONDS}s"
