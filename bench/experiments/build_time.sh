#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repo root, with build-dev/ carried: where the time
# of an INT8 build goes. For each model (default: resnet50), `kiln optimize --int8 --force-int8
# --batch 256` with 512 calibration images and no caches, as bench/int8_gpu.sh times it, twice;
# prints the build's wall time and the `-v` lines that break it down. Logs go to $OUT/build_time.
#   bench/experiments/build_time.sh [MODEL...]    (resnet50, mobilenet_v2)
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
dir="$OUT/build_time"
mkdir -p "$dir"
models=("${@:-resnet50}")
$PY bench/torchvision_onnx.py "$dir" "$(IFS=,; echo "${models[*]}")" 512 || exit 1
for m in "${models[@]}"; do
  [ -f "$dir/$m.onnx" ] || { echo "no $dir/$m.onnx: the export failed" >&2; exit 1; }
  for run in 1 2; do
    log="$dir/${m}_$run.log"
    rm -f "$dir/${m}_calib.json" "$dir/${m}_timing.json"
    start=$(date +%s.%N)
    build-dev/kiln optimize "$dir/$m.onnx" --device gpu --batch 256 --int8 --force-int8 --calib "$dir/calib" \
      --calib-cache "$dir/${m}_calib.json" --timing-cache "$dir/${m}_timing.json" -v -o "$dir/$m.kiln" >"$log" 2>&1
    rc=$?
    echo "$m run $run: exit $rc, $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s"
    grep -E "^  (calibration|quantize-int8|choose-tactics|write-engine)" "$log" | cut -c1-400
  done
done
