#!/usr/bin/env bash
# Builds Kiln here and packs what the GPU machine needs into build-dev/ (listed in
# .git/info/exclude): the stripped kiln binary and the builder-side shared libraries the GPU
# machine's image lacks, and the stripped GPU test binaries (build-dev/tests/*_gpu_test). Then,
# from the device tool: carry build-dev and run bench/gpu_check.sh or bench/gpu_tests.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
rm -rf build-dev && mkdir -p build-dev/lib
cp build/kiln build-dev/kiln && strip build-dev/kiln
for lib in libonnx_proto.so.1 libprotobuf.so.32 libfmt.so.9; do
  cp -L "/lib/x86_64-linux-gnu/$lib" build-dev/lib/
done
# GPU tests (tests/gpu; built when the CUDA backend is): bench/gpu_tests.sh runs each one there.
mkdir -p build-dev/tests
for t in build/tests/*_gpu_test; do
  [ -x "$t" ] || continue
  cp "$t" build-dev/tests/ && strip "build-dev/tests/$(basename "$t")"
done
du -sh build-dev
