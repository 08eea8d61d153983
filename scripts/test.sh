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
bash scripts/build.sh
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
