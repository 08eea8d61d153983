#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ unpacked: per-layer profiles of the
# `--best --force-int8` ResNet-50 and MobileNetV2 engines (torchvision topology, random weights,
# 256 random calibration images) at batch 256 and 1, next to the FP16 engines' profiles.
# Profiles go to $OUT/prof_<model>_<mode>_b<batch>.txt; a summary is printed.
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
work=$(mktemp -d)
models=${1:-resnet50,mobilenet_v2}
batches=${2:-256,1}
$PY bench/torchvision_onnx.py "$work" "$models"
for m in ${models//,/ }; do
  for b in ${batches//,/ }; do
    for mode in best fp16; do
      flags="--fp16"
      [ $mode = best ] && flags="--best --force-int8 --calib $work/calib --calib-cache $work/${m}_calib.json"
      build-dev/kiln bench "$work/$m.onnx" --device gpu --batch $b $flags --cuda-graph --no-transfers --duration 1 \
        --profile --timing-cache "$work/tc.json" > "$OUT/prof_${m}_${mode}_b$b.txt" 2>&1
      echo "$m $mode b$b: $(grep -E '^GPU compute' "$OUT/prof_${m}_${mode}_b$b.txt")"
    done
  done
done
