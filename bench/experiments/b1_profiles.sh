#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ carried: the batch-1 per-layer profiles of
# LeNet-5 and MobileNetV2 (FP32 and FP16, CUDA graphs), exported by bench/peers.py without its
# PyTorch timings. Profiles go to $OUT/b1_<model>_<precision>.txt; a summary is printed.
set -uo pipefail
source bench/device_env.sh
work=$(mktemp -d)
/opt/torch/.venv/bin/python bench/peers.py --kiln "$PWD/build-dev/kiln" --out "$work" --models "${1:-lenet5,mobilenet_v2}" \
  --batches 1 --no-compile > "$work/peers.log" 2>&1
for m in "$work"/*.onnx; do
  name=$(basename "$m" .onnx)
  for p in fp32 fp16; do
    flag=""
    [ $p = fp16 ] && flag=--fp16
    build-dev/kiln bench "$m" --batch 1 $flag --cuda-graph --no-transfers --duration 1 --profile \
      --timing-cache "$work/cache.json" > "$OUT/b1_${name}_$p.txt" 2>&1
    echo "$name $p: $(grep -E '^GPU compute' "$OUT/b1_${name}_$p.txt") | $(grep -E '^  total' "$OUT/b1_${name}_$p.txt")"
  done
done
