#!/usr/bin/env bash
# The main job end to end, as a user runs it (README's first command). Installs what it needs and
# builds, then:
#  1. the training flow (scripts/train_demo.sh): LeNet-5 trained on Fashion-MNIST on the GPU (or
#     the CPU when there is none), exported to ONNX, optimized into an FP32 and a calibrated INT8
#     engine, both evaluated for accuracy and benchmarked; a summary table and the training curves
#     (out/demo/train/curves.svg).
#  2. a model from elsewhere: ResNet-18 (torchvision's topology, seeded weights) written as ONNX,
#     optimized, inspected, run and checked against onnxruntime, and benchmarked.
#
#   scripts/demo.sh [--device cpu|gpu] [--epochs N] [--data DIR] [--kiln BIN]
#
# The options go to the training flow (defaults: the GPU when nvidia-smi finds one; see
# scripts/train_demo.sh). --kiln BIN skips installing and building and uses that kiln (a machine
# without network; part 2 then needs Python's onnx and onnxruntime already there, or is skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
args=() kiln="" device=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kiln) kiln=$2; shift 2 ;;
    --device) device=$2; args+=("$1" "$2"); shift 2 ;;
    --epochs | --data) args+=("$1" "$2"); shift 2 ;;
    *) echo "usage: $0 [--device cpu|gpu] [--epochs N] [--data DIR] [--kiln BIN]" >&2; exit 2 ;;
  esac
done
setup=0
if [ -z "$kiln" ]; then
  bash scripts/install_deps.sh
  bash scripts/build.sh
  kiln=build/kiln setup=1
fi
if [ -z "$device" ]; then
  if nvidia-smi -L >/dev/null 2>&1; then device=gpu; else device=cpu; fi
fi

echo "==== 1. Train, export, optimize (FP32 and INT8), evaluate, benchmark"
bash scripts/train_demo.sh --kiln "$kiln" --out out/demo/train --device "$device" "${args[@]}"

# Part 2, as a function: a machine without onnxruntime (see --kiln) skips it.
resnet18() {
  local out=out/demo
  echo "== writing ResNet-18 (torchvision topology, seeded weights) and its onnxruntime reference"
  python3 tools/make_models.py "$out" --models resnet18
  echo "== kiln optimize"
  "$kiln" optimize "$out/resnet18/model.onnx" -o "$out/resnet18.kiln" -v
  echo "== kiln inspect"
  "$kiln" inspect "$out/resnet18.kiln" > "$out/inspect.txt"
  head -n 14 "$out/inspect.txt"
  echo "   ... ($(awk '/^steps/ {print $2}' "$out/inspect.txt") steps in all: $out/inspect.txt)"
  echo "== kiln run --expect (onnxruntime's outputs)"
  local atol
  atol=$(python3 -c "import onnx,numpy as np; from onnx import numpy_helper as h; print(1e-4*np.abs(h.to_array(onnx.load_tensor('$out/resnet18/test_data_set_0/output_0.pb'))).max())")
  "$kiln" run "$out/resnet18.kiln" --inputs "$out/resnet18/test_data_set_0" --expect "$out/resnet18/test_data_set_0" \
    --rtol 1e-4 --atol "$atol"
  echo "== kiln bench (CPU)"
  "$kiln" bench "$out/resnet18.kiln" --duration 1 --iterations 5 --warmup 1
  # On the GPU: the same model as an FP16 GPU engine, checked against onnxruntime (1e-2 of the
  # output's range), then benchmarked with a CUDA graph and a per-layer profile.
  if [ "$device" = gpu ]; then
    echo "== kiln optimize --device gpu --fp16"
    "$kiln" optimize "$out/resnet18/model.onnx" -o "$out/resnet18_gpu_fp16.kiln" --device gpu --fp16 \
      --timing-cache "$out/timing_cache.json"
    "$kiln" run "$out/resnet18_gpu_fp16.kiln" --inputs "$out/resnet18/test_data_set_0" \
      --expect "$out/resnet18/test_data_set_0" --rtol 1e-2 --atol "$(python3 -c "print(100 * $atol)")"
    echo "== kiln bench (GPU, FP16, CUDA graph)"
    "$kiln" bench "$out/resnet18_gpu_fp16.kiln" --cuda-graph --profile --json "$out/bench_gpu.json"
  fi
}

echo
echo "==== 2. An ONNX model from elsewhere: ResNet-18"
if [ "$setup" = 1 ] || python3 -c "import onnx, onnxruntime, numpy" 2>/dev/null; then
  resnet18
else
  echo "   (skipped: this Python has no onnx/onnxruntime to write the model and its reference)"
fi
echo
echo "==== Summary of part 1 (out/demo/train/summary.txt)"
cat out/demo/train/summary.txt
