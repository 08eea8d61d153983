#!/usr/bin/env bash
# The main job end to end: a real-topology model (ResNet-18) is written as ONNX, optimized into an
# engine, inspected, run, and checked against onnxruntime.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
out=out/demo
mkdir -p "$out"
echo "== writing ResNet-18 (torchvision topology, seeded weights) and its onnxruntime reference"
python3 tools/make_models.py "$out" --models resnet18
echo "== kiln optimize"
build/kiln optimize "$out/resnet18/model.onnx" -o "$out/resnet18.kiln" -v
echo "== kiln inspect"
build/kiln inspect "$out/resnet18.kiln" > "$out/inspect.txt"
head -n 14 "$out/inspect.txt"
echo "   ... ($(grep -c "^ " "$out/inspect.txt") steps in all: $out/inspect.txt)"
echo "== kiln run --expect (onnxruntime's outputs)"
atol=$(python3 -c "import onnx,numpy as np; from onnx import numpy_helper as h; print(1e-4*np.abs(h.to_array(onnx.load_tensor('$out/resnet18/test_data_set_0/output_0.pb'))).max())")
build/kiln run "$out/resnet18.kiln" --inputs "$out/resnet18/test_data_set_0" --expect "$out/resnet18/test_data_set_0" --rtol 1e-4 --atol "$atol"
