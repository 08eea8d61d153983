#!/usr/bin/env bash
# Installs, builds and runs every CPU test (unit tests, the ONNX backend suite, model parity,
# command-line checks) and a short fuzzing run. GPU tests carry the ctest label `gpu` and run on
# the GPU machine (bench/gpu_check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's start, in seconds since this script began: CI allows 90 minutes, Kiln aims at 60.
t0=$(date +%s)
phase() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
phase "installing dependencies"
bash scripts/install_deps.sh
phase "building"
# Without a GPU here no GPU test or benchmark can run: CUDA code is compiled to unoptimized PTX only (it must
# still compile), and the GPU tests and the benchmarks are not built (bench/prepare_device_build.sh
# builds them for the GPU machine). This keeps CI's three builds within its time.
if nvidia-smi -L >/dev/null 2>&1; then
  bash scripts/build.sh
else
  bash scripts/build.sh -DKILN_CUDA_CHECK_ONLY=ON -DKILN_GPU_TESTS=OFF -DKILN_BENCH=OFF
fi
phase "running tests"
# ctest runs tests side by side, one per core. Kiln's CPU threads are OpenMP's, and libgomp keeps a
# team's idle threads spinning after each parallel region (good for one process's back-to-back
# steps); beside another test those spinning threads took its cores: the MLP training test ran in
# 3.0 s instead of 1.0 s next to a twin, 85 s in a CI run. Passive waiting puts them to sleep.
export OMP_WAIT_POLICY=PASSIVE
(cd build && ctest -L cpu -j"$(nproc)" --output-on-failure --timeout 1200)
if [ -f tests/fuzz/CMakeLists.txt ] && [ -f scripts/fuzz.sh ]; then
  phase "fuzzing briefly (scripts/fuzz.sh 30 per target)"
  bash scripts/fuzz.sh 30
fi
phase "aarch64: cross-compiled, tested under qemu (scripts/test_jetson.sh)"
bash scripts/test_jetson.sh
phase "all tests passed"
