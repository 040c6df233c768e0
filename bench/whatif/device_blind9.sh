#!/usr/bin/env bash
# One device call for the ninth blind round (nowcast, protvar, changedet): the equivalence
# check, every variant measured, a trace of each baseline (bench/whatif/device_blind_round.sh).
EQUIV=bench/whatif/blind9_equiv.py
WORKLOADS=${WORKLOADS:-nowcast protvar changedet}
EQUIV_S=90
MEASURE_S=${MEASURE_S:-100}
source bench/whatif/device_blind_round.sh
