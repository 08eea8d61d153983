#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ carried: the builder's timed INT8-or-float
# choice (src/build/engine_timing.h) on torchvision MobileNetV2 at batch 64: `kiln optimize --best`
# without and with --force-int8, calibrated on 64 random images. Prints the builder's decision.
set -uo pipefail
source bench/device_env.sh
work=$(mktemp -d)
/opt/torch/.venv/bin/python - "$work" <<'PY'
import os, sys
import numpy as np
import torch, torchvision
w = sys.argv[1]
torch.manual_seed(0)
m = torchvision.models.mobilenet_v2(weights=None).eval()
torch.onnx.export(m, torch.randn(1, 3, 224, 224), os.path.join(w, "m.onnx"), opset_version=17, input_names=["input"],
                  output_names=["logits"], dynamic_axes={"input": {0: "batch"}}, dynamo=False)
os.makedirs(os.path.join(w, "calib"))
np.save(os.path.join(w, "calib", "x.npy"), np.random.default_rng(0).normal(0, 1, (64, 3, 224, 224)).astype(np.float32))
PY
for force in "" --force-int8; do
  echo "== kiln optimize --device gpu --batch 64 --best $force"
  build-dev/kiln optimize "$work/m.onnx" --device gpu --batch 64 --best $force --calib "$work/calib" \
    -o "$work/m.kiln" 2>&1 | grep -v '^calibrating' | tail -n 3
done
