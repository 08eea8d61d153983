#!/usr/bin/env bash
# Installs what Kiln needs to build and test on Debian 12 / Ubuntu 24.04 (the CUDA toolkit, if
# wanted, is expected to be installed already: nvcc in /usr/local/cuda/bin or on PATH).
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(build-essential cmake ninja-build ccache pkg-config python3 python3-pip
      libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata
      libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev libfmt-dev
      libflatbuffers-dev flatbuffers-compiler libxxhash-dev zlib1g-dev libpng-dev libjpeg-dev dataset-fashion-mnist
      libdnnl-dev
      clang libclang-rt-14-dev
      libcpp-httplib-dev libgrpc++-dev protobuf-compiler-grpc libb64-0d python3-venv)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# PyTorch for the model sweep's CPU subset (ctest model_sweep_cpu): Debian's, for the system Python
# (/usr/bin/python3), without the recommended desktop packages.
if ! /usr/bin/python3 -c "import torch, torchvision" 2>/dev/null; then
  echo "== installing PyTorch (Debian's python3-torch, python3-torchvision)"
  [ ${#missing[@]} -gt 0 ] || $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-torch \
    python3-torchvision >/dev/null
fi
if ! python3 -c "import onnx, onnxruntime, numpy" 2>/dev/null; then
  echo "== installing Python packages: onnx onnxruntime numpy"
  python3 -m pip install -q onnx onnxruntime numpy 2>/dev/null ||
    python3 -m pip install -q --break-system-packages onnx onnxruntime numpy
fi
# The serving tests' third-party clients and servers, in their own virtual environment (they pin
# numpy and protobuf versions that onnx and onnxruntime above do not accept): tritonclient and its
# perf_analyzer (with the CUDA runtime library it links), and Triton Inference Server from the
# PyTriton wheel. Kept in ~/.cache, so a clean clone reuses it.
bash "$(dirname "$0")/install_serve_deps.sh"
