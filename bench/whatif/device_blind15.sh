#!/usr/bin/env bash
# One device call for the fifteenth blind round: the equivalence check, every variant measured, a
# trace of each baseline (bench/whatif/device_blind_round.sh).
EQUIV=bench/whatif/blind15_equiv.py
WORKLOADS=${WORKLOADS:?set WORKLOADS to the two workloads}
EQUIV_S=${EQUIV_S:-90}
MEASURE_S=${MEASURE_S:-100}
source bench/whatif/device_blind_round.sh
