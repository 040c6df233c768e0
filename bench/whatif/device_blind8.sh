#!/usr/bin/env bash
# One device call for the eighth blind round (kwspot, vecsearch, vidsr): the equivalence check,
# every variant measured, a trace of each baseline (bench/whatif/device_blind_round.sh).
EQUIV=bench/whatif/blind8_equiv.py
WORKLOADS=${WORKLOADS:-kwspot vecsearch vidsr}
EQUIV_S=90
MEASURE_S=${MEASURE_S:-110}
source bench/whatif/device_blind_round.sh
