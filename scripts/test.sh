#!/usr/bin/env bash
# Installs, builds and runs every CPU test (unit tests, the ONNX backend suite, model parity,
# command-line checks) and a short fuzzing run. GPU tests carry the ctest label `gpu` and run on
# the GPU machine (bench/gpu_check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
echo "== running tests"
(cd build && ctest -L cpu -j"$(nproc)" --output-on-failure --timeout 1200)
if [ -f tests/fuzz/CMakeLists.txt ] && [ -f scripts/fuzz.sh ]; then
  echo "== fuzzing briefly (scripts/fuzz.sh 30 per target)"
  bash scripts/fuzz.sh 30
fi
echo "== aarch64: cross-compiled, tested under qemu (scripts/test_jetson.sh)"
bash scripts/test_jetson.sh
