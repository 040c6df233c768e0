#!/usr/bin/env bash
# Device call 1: machine facts, the agent on a tiny workload, a 5-batch capture, a quick overhead look.
set -x
nvidia-smi --query-gpu=name,driver_version --format=csv
python3 -c "import sys, torch; print(sys.version, torch.__version__, torch.version.cuda)"
python3 -c "import pyarrow; print('pyarrow', pyarrow.__version__)"
python3 -c "import numpy; print('numpy', numpy.__version__)"
python3 -c "import polars; print('polars', polars.__version__)"
python3 -c "import cupti" ; pip list 2>/dev/null | grep -i -E "cupti|arrow|polars|numpy|cuda"
B=$PWD/capture/cupti/bootstrap
mkdir -p $OUT/tiny $OUT/gpt
PYTHONPATH=$B ZYM_CUPTI_DIR=$OUT/tiny timeout 120 python3 tests/cupti/device/tiny_workload.py 2>&1 | tail -20
PYTHONPATH=$B ZYM_CUPTI_DIR=$OUT/gpt timeout 120 python3 sample_traces/gpt_decode_server.py --batches 5
ls -la $OUT/tiny $OUT/gpt
for i in 1 2; do
  echo "== plain $i"; timeout 120 python3 sample_traces/gpt_decode_server.py --batches 30
  echo "== cupti $i"; PYTHONPATH=$B ZYM_CUPTI_DIR=/tmp/b$i timeout 120 python3 sample_traces/gpt_decode_server.py --batches 30
  ls -la /tmp/b$i
done
