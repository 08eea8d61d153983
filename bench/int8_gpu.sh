#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repo root, with build-dev/ carried: INT8 build
# time, INT8 vs FP16 speed, the INT8 per-layer profile and GPU-vs-CPU INT8 agreement
# (bench/int8_gpu.py); then the Fashion-MNIST INT8 accuracy table and onnxruntime's QDQ models on
# the GPU (tests/python/int8_test.py --device gpu). Logs and JSON go to $OUT.
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
$PY bench/int8_gpu.py --kiln "$PWD/build-dev/kiln" --out "$OUT/int8" "$@" 2>&1 | tee "$OUT/int8_gpu.log" | tail -n 30
DATA=/usr/share/datasets/fashion-mnist
[ -d build-dev/fashion-mnist ] && DATA=build-dev/fashion-mnist
$PY tests/python/int8_test.py --kiln "$PWD/build-dev/kiln" --device gpu --data "$DATA" 2>&1 | tee "$OUT/int8_test_gpu.log" |
  grep -v "^ok" | tail -n 30
