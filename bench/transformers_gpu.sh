#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repo root, with build-dev/ carried: issue 40's
# transformer figures (bench/transformers_gpu.py). Extra arguments go to the script; the JSON and
# log go to $OUT/transformers, the engines and models stay behind.
set -uo pipefail
source bench/device_env.sh
/opt/torch/.venv/bin/python bench/transformers_gpu.py --kiln "$PWD/build-dev/kiln" --out "$OUT/transformers" "$@" 2>&1 |
  tee "$OUT/transformers.log" | tail -n 30
rm -rf "$OUT"/transformers/*.onnx "$OUT"/transformers/*.kiln "$OUT"/transformers/*_out "$OUT"/transformers/*_inputs
