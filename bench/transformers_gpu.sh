#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repo root, with build-dev/ carried: issue 40's
# transformer figures (bench/transformers_gpu.py). Extra arguments go to the script; the JSON,
# profiles and log come back archived in $OUT/transformers_runN.tgz, the engines and models stay
# behind.
set -uo pipefail
source bench/device_env.sh
/opt/torch/.venv/bin/python bench/transformers_gpu.py --kiln "$PWD/build-dev/kiln" --out "$OUT/transformers" "$@" 2>&1 |
  tee "$OUT/transformers.log" | tail -n 30
rm -rf "$OUT"/transformers/*.onnx "$OUT"/transformers/*.kiln "$OUT"/transformers/*_out "$OUT"/transformers/*_inputs
# The device tool brings back at most 8 files from $OUT: the run's JSON, profiles and logs as one
# archive each run (transformers_run0.tgz, transformers_run1.tgz, ... when runs are chained).
n=$(ls "$OUT"/transformers_run*.tgz 2>/dev/null | wc -l)
tar -C "$OUT" -czf "$OUT/transformers_run$n.tgz" transformers && rm -rf "$OUT/transformers"
