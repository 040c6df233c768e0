#!/usr/bin/env bash
# One device call for the sixth blind round (ctseg, cliptag, mottrack): the equivalence check,
# every variant measured, a trace of each baseline (bench/whatif/device_blind_round.sh).
EQUIV=bench/whatif/blind6_equiv.py
WORKLOADS=${WORKLOADS:-ctseg cliptag mottrack}
MEASURE_S=${MEASURE_S:-150}
source bench/whatif/device_blind_round.sh
