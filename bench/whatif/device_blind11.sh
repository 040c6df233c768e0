#!/usr/bin/env bash
# One device call for the eleventh blind round (motionfc, vocalsep): the equivalence check,
# every variant measured, a trace of each baseline (bench/whatif/device_blind_round.sh).
EQUIV=bench/whatif/blind11_equiv.py
WORKLOADS=${WORKLOADS:-motionfc vocalsep}
EQUIV_S=90
MEASURE_S=${MEASURE_S:-100}
source bench/whatif/device_blind_round.sh
