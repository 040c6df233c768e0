#!/usr/bin/env bash
# Here, after the device call of capture_overhead_h200.sh: FILES is its files_at folder.
#   bash bench/device/finalize_h200.sh FILES
# Prints the tables for docs/benchmarks.md and re-finalizes the bundled sample capture
# (sample_traces/gpt_decode_server.parquet) from the re-recorded raw streams (eBPF + CUPTI).
set -eu
FILES=${1:?give the folder of the device call files}
PY=${PY:-python3}
W=$(mktemp -d)
tar xzf "$FILES/sample.tgz" -C "$W"
$PY -m zym.cli.main capture --finalize "$W/gpt5.parquet.raw" -o sample_traces/gpt_decode_server.parquet
$PY -m zym.cli.main analyze sample_traces/gpt_decode_server.parquet | head -12
$PY bench/capture_overhead.py report "$FILES"/percall*.json "$FILES"/e2e-*.json
grep -E "^== |total|rc " "$FILES/log.txt" || true
rm -rf "$W"
