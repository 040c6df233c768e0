# Sourced by the device scripts: `run MAX_SECONDS CMD...` runs one stage under timeout, skipped
# when fewer than 30 s are left before $DEADLINE (seconds since the script started), its limit
# cut to what is left, so a device call ends inside its own limit. RUN_TAIL: lines shown.
run() {
    local max=$1; shift
    local left=$(( DEADLINE - SECONDS ))
    if [ "$left" -lt 30 ]; then echo "== skipped (deadline): $*"; return; fi
    [ "$max" -gt "$left" ] && max=$left
    echo "== at ${SECONDS}s: $*"
    timeout "$max" "$@" 2>&1 | tail -"${RUN_TAIL:-8}"
}
# The machine and torch, printed at the top of a device call's output.
device_env() {
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c "import torch; print(torch.__version__)"
}
