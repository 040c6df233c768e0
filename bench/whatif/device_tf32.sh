#!/usr/bin/env bash
# One device call for compute.tf32-matmul-could-be-bf16 (bench/whatif/workloads/tf32mlp.py:
# a float32 transformer with TF32 allowed): both variants measured and traced
# (device_variants.sh). Results: $OUT (kept in bench/whatif/results/<gpu>-tf32/).
WORKLOAD=tf32mlp TRACED="base bf16" exec bash bench/whatif/device_variants.sh
