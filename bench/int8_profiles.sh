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
$PY - "$work" "$models" <<'PYEOF'
import sys, numpy as np, torch, torchvision
work, models = sys.argv[1], sys.argv[2].split(",")
np.save(f"{work}/calib.npy", np.random.default_rng(0).normal(0, 1, (256, 3, 224, 224)).astype(np.float32))
for m in models:
    net = getattr(torchvision.models, m)().eval()
    torch.onnx.export(net, torch.randn(1, 3, 224, 224), f"{work}/{m}.onnx", opset_version=17,
                      input_names=["input"], output_names=["logits"], dynamic_axes={"input": {0: "batch"}},
                      dynamo=False)
PYEOF
mkdir -p "$work/calib" && mv "$work/calib.npy" "$work/calib/"
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
