#!/usr/bin/env bash
# One device call for the seventh blind round (lidardet, posekpt, fraudscore): the equivalence
# check, every variant measured, a trace of each baseline (bench/whatif/device_blind_round.sh).
EQUIV=bench/whatif/blind7_equiv.py
WORKLOADS=${WORKLOADS:-lidardet posekpt fraudscore}
EQUIV_S=90
MEASURE_S=${MEASURE_S:-110}
source bench/whatif/device_blind_round.sh
