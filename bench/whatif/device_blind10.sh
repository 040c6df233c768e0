#!/usr/bin/env bash
# One device call for the tenth blind round (spkdiar, docparse): the equivalence check, every
# variant measured, a trace of each baseline (bench/whatif/device_blind_round.sh).
EQUIV=bench/whatif/blind10_equiv.py
WORKLOADS=${WORKLOADS:-spkdiar docparse}
EQUIV_S=90
MEASURE_S=${MEASURE_S:-100}
source bench/whatif/device_blind_round.sh
