#!/bin/sh
# Every Kineto trace kept in the repo's results and tests, imported whole and out of core in
# windows of about 500 and 20,000 events: the two captures compared by content
# (tests/same_tables.py). One line per trace and window size: windows built, SAME or what
# differs. Run from the repository root: sh bench/same_content.sh > out.txt
set -u
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/one.py" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "tests")
from same_tables import differences
from zym.capture import kineto_stream as ks
from zym.capture.kineto import import_kineto
trace, events, work = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
said = []
ks.window_events = lambda budget: events
import_kineto(trace, work / "w.parquet", said.append, force=True, budget=1)
import_kineto(trace, work / "m.parquet", force=True, budget=1 << 40)
windows = sum(s.startswith("building window") for s in said)
print(trace, events, f"windows={windows}", differences(work / "w.parquet", work / "m.parquet") or "SAME")
PY
for f in sample_traces/*.json.gz $(find bench/whatif/results bench/diff/results bench/native/results tests/importer/public_traces -name "*.json.gz" | grep -v execution_trace | sort); do
  for events in 500 20000; do
    python3 "$work/one.py" "$f" "$events" "$work" 2>&1 | tail -1
  done
done
