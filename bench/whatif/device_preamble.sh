# Sourced at the top of the what-if device scripts (after DEADLINE and RUN_TAIL): strict mode,
# unbuffered Python, `run` (bench/device/run_step.sh), the machine and torch printed, and $H,
# the harness.
set -uo pipefail
export PYTHONUNBUFFERED=1
source bench/device/run_step.sh
device_env
H="python3 bench/whatif/harness.py"
