#!/usr/bin/env bash
# Builds Kiln here and packs what the GPU machine needs into build-dev/ (listed in
# .git/info/exclude): the stripped kiln binary and the builder-side shared libraries the GPU
# machine's image lacks. Then, from the device tool: carry build-dev and run bench/gpu_check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
rm -rf build-dev && mkdir -p build-dev/lib
cp build/kiln build-dev/kiln && strip build-dev/kiln
for lib in libonnx_proto.so.1 libprotobuf.so.32 libfmt.so.9; do
  cp -L "/lib/x86_64-linux-gnu/$lib" build-dev/lib/
done
du -sh build-dev
