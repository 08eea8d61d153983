#!/usr/bin/env bash
# Training end to end: LeNet-5 trained on Fashion-MNIST (Debian's dataset-fashion-mnist), exported
# to ONNX, checked against onnxruntime, optimized into an engine, evaluated on the test set and
# benchmarked. With a GPU (nvidia-smi finds one) training takes the full set for 15 epochs there
# (about 90.5% test accuracy); without one, 3 epochs on 20,000 images on the CPU (a minute or two).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
out=out/train_demo
mkdir -p "$out"
data=/usr/share/datasets/fashion-mnist
if nvidia-smi -L >/dev/null 2>&1; then
  echo "== kiln train (LeNet-5, GPU)"
  how=(--device gpu --epochs 15 --batch 128 --solver sgd --lr 0.05 --weight-decay 0.0005 --lr-schedule cosine)
else
  echo "== kiln train (LeNet-5, CPU)"
  how=(--limit 20000 --epochs 3 --batch 64 --solver adam)
fi
build/kiln train --net lenet5 --data "$data" "${how[@]}" \
  --metrics "$out/metrics.csv" --plot "$out/curves.svg" --example "$out/example" -o "$out/lenet5.onnx"
echo "== onnxruntime against Kiln's own forward pass"
python3 - "$out" <<'PY'
import sys, numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper
out = sys.argv[1]
load = lambda p: numpy_helper.to_array(onnx.load_tensor(p))
x, ref = load(f"{out}/example/input_0.pb"), load(f"{out}/example/output_0.pb")
y = ort.InferenceSession(f"{out}/lenet5.onnx", providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
print(f"max |onnxruntime - kiln| = {np.abs(y - ref).max():.3g} (logits up to {np.abs(ref).max():.3g})")
PY
echo "== kiln optimize"
build/kiln optimize "$out/lenet5.onnx" -o "$out/lenet5.kiln" --batch 256
echo "== kiln eval (test set)"
build/kiln eval "$out/lenet5.kiln" --data "$data"
echo "== kiln bench"
build/kiln bench "$out/lenet5.kiln" --duration 1 --warmup 5
