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
echo "== kiln bench (CPU)"
build/kiln bench "$out/resnet18.kiln" --duration 1 --iterations 5 --warmup 1
# With a GPU: the same model as an FP16 GPU engine, checked against onnxruntime (1e-2 of the
# output's range), then benchmarked with a CUDA graph and a per-layer profile.
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "== kiln optimize --device gpu --fp16"
  build/kiln optimize "$out/resnet18/model.onnx" -o "$out/resnet18_gpu_fp16.kiln" --device gpu --fp16 \
    --timing-cache "$out/timing_cache.json"
  build/kiln run "$out/resnet18_gpu_fp16.kiln" --inputs "$out/resnet18/test_data_set_0" \
    --expect "$out/resnet18/test_data_set_0" --rtol 1e-2 --atol "$(python3 -c "print(100 * $atol)")"
  echo "== kiln bench (GPU, FP16, CUDA graph)"
  build/kiln bench "$out/resnet18_gpu_fp16.kiln" --cuda-graph --profile --json "$out/bench_gpu.json"
fi
