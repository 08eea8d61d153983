#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repo root, with build-dev/ and build-serve/ as made
# by `bench/prepare_device_build.sh --serve` (kiln and libtriton_kiln.so; the serving tools): issue
# 39's serving figures (bench/serve_gpu.py). Together they pass the carry limit: carry build-serve in
# a first call (`bash bench/serve_gpu.sh --unpack-only`), then build-dev in the next while the
# machine is warm. Logs and JSON go to $OUT/serve.
set -uo pipefail
tools=build-serve/serve-tools
if [ ! -d "$tools" ]; then
  mkdir -p "$tools" && xz -dc build-serve/serve-tools.tar.xz | tar -C "$tools" -xf -
fi
[ "${1:-}" = "--unpack-only" ] && exit 0
source bench/device_env.sh
/opt/torch/.venv/bin/python bench/serve_gpu.py --kiln "$PWD/build-dev/kiln" --backend "$PWD/build-dev/libtriton_kiln.so" \
  --tools "$PWD/$tools" --out "$OUT/serve" "$@" 2>&1 | tee "$OUT/serve.log" | tail -n 40
# What comes back from the GPU machine: the JSON, logs and perf_analyzer's CSVs, not the models.
rm -rf "$OUT/serve/calib" "$OUT/serve/repo" "$OUT/serve/backends" "$OUT"/serve/*.onnx "$OUT"/serve/*.kiln
