#!/usr/bin/env bash
# Configures and builds Kiln into build/ (CUDA for sm_90 when nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
# ccache (~/.cache/ccache) lets a clean clone on a machine that built Kiln before reuse its objects.
# CCACHE_BASEDIR makes the paths it hashes relative, so two checkouts share the cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
# The full build unless the caller says otherwise (scripts/test.sh does on machines without a GPU);
# given each time, so that a build folder configured by the tests does not stay PTX-only.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "${launcher[@]}" \
  -DKILN_CUDA_CHECK_ONLY=OFF -DKILN_GPU_TESTS=ON -DKILN_BENCH=ON "$@" >/dev/null
echo "== building (this takes a few minutes on 2 cores)"
ninja -C build -j"$(nproc)" | grep -E "^FAILED|error" || true
ninja -C build -j"$(nproc)" >/dev/null   # fails loudly if the build did not finish
